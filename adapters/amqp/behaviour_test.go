package amqp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// A publish that no queue is bound for fails with ErrUnroutable naming
// exactly the returned messages; the others of the batch are accepted.
func TestUnroutable(t *testing.T) {
	c := newCleaner(t)
	topic := unique("unroutable")
	c.topic(topic)
	pub := openPub(t, "exchange_kind", "direct")

	// No group at all: every message fails, typed, named.
	a, b := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b"))
	err := pub.Publish(context.Background(), topic, a, b)
	if !errors.Is(err, amqp.ErrUnroutable) {
		t.Fatalf("Publish with no queue bound = %v, want ErrUnroutable", err)
	}
	var pe *relay.PublishError
	if !errors.As(err, &pe) || len(pe.Failed) != 2 || pe.Failed[0].ID != a.ID || pe.Failed[1].ID != b.ID {
		t.Fatalf("error %v does not name both messages", err)
	}
	var ue *amqp.UnroutableError
	if !errors.As(err, &ue) || ue.ReplyCode != 312 || ue.Exchange != topic || ue.Topic != topic {
		t.Errorf("UnroutableError %+v", ue)
	}
	// The text names the provisioning command and each message ID once
	// (the PublishError names it; the UnroutableError does not repeat it).
	want := fmt.Sprintf("relay: 2 message(s) not published; %[1]s: %[3]s; %[2]s: %[3]s", a.ID, b.ID,
		fmt.Sprintf("relay/amqp: message unroutable: no queue is bound to exchange %q for routing key %q (broker reply 312 NO_ROUTE); provision a group first with `relay provision URL %s --group GROUP` (or Subscriber.Provision), or check the binding keys", topic, "", topic))
	if err.Error() != want {
		t.Errorf("error text\n%s\nwant\n%s", err, want)
	}
	if n := strings.Count(err.Error(), a.ID); n != 1 {
		t.Errorf("message ID %s appears %d times in %q", a.ID, n, err)
	}

	// A group bound to key "routed" only: the batch partly fails.
	sub := openSub(t, c, unique("g"), "exchange_kind", "direct", "binding_key", "routed")
	relaytest.Provision(t, sub, topic)
	msgs := make([]*relay.Message, 10)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprint(i)))
		msgs[i].Key = "routed"
		if i%3 == 0 {
			msgs[i].Key = "nowhere"
		}
	}
	err = pub.Publish(context.Background(), topic, msgs...)
	if !errors.As(err, &pe) {
		t.Fatalf("partly unroutable batch = %v, want *relay.PublishError", err)
	}
	failed := map[string]bool{}
	for _, id := range pe.FailedIDs() {
		failed[id] = true
	}
	ch, _ := relaytest.Subscribe(t, sub, topic)
	for i, m := range msgs {
		if want := m.Key == "nowhere"; failed[m.ID] != want {
			t.Errorf("message %d (key %s): reported failed %v", i, m.Key, failed[m.ID])
		}
		if m.Key == "routed" {
			got := relaytest.Next(t, ch, "routed message")
			if got.ID != m.ID {
				t.Errorf("got %s, want %s", got.ID, m.ID)
			}
			_ = got.Ack()
		}
	}
	if extra := relaytest.Quiet(ch, 300*time.Millisecond); extra != nil {
		t.Errorf("unexpected delivery %s", extra.ID)
	}
}

// Messages from a publisher that knows nothing of relay (typed headers,
// no message_id) are delivered with string metadata and a stable ID, and
// survive Nack, NackAfter and redelivery.
func TestForeignPublisher(t *testing.T) {
	c := newCleaner(t)
	topic, group := unique("foreign"), unique("g")
	sub := openSub(t, c, group)
	relaytest.Provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)

	raw := rawChannel(t)
	ts := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	headers := amqp091.Table{
		"int":     int32(-42),
		"long":    int64(1) << 40,
		"float":   3.25,
		"bool":    true,
		"time":    ts,
		"decimal": amqp091.Decimal{Scale: 2, Value: 1999},
		"bytes":   []byte("raw"),
		"void":    nil,
		"table":   amqp091.Table{"nested": int32(1), "list": []any{"a", int32(2)}},
		"x-death": []any{amqp091.Table{"queue": "upstream", "reason": "rejected", "count": int64(3), "time": ts}},
	}
	err := raw.PublishWithContext(context.Background(), topic, "some.routing.key", false, false, amqp091.Publishing{
		Headers:       headers,
		ContentType:   "application/json",
		CorrelationId: "corr-1",
		AppId:         "legacy",
		Timestamp:     ts,
		Priority:      3,
		Body:          []byte(`{"legacy":true}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := relay.Metadata{
		"int": "-42", "long": "1099511627776", "float": "3.25", "bool": "true", "time": "2026-05-06T07:08:09Z",
		"decimal": "19.99", "bytes": "raw", "void": "", "table": `{"list":["a",2],"nested":1}`,
		"x-death":              `[{"count":3,"queue":"upstream","reason":"rejected","time":"2026-05-06T07:08:09Z"}]`,
		amqp.MetaContentType:   "application/json",
		amqp.MetaCorrelationID: "corr-1",
		amqp.MetaAppID:         "legacy",
		amqp.MetaTimestamp:     "2026-05-06T07:08:09Z",
		amqp.MetaPriority:      "3",
	}
	check := func(m *relay.Message, attempt int, what string) {
		t.Helper()
		if m.Key != "some.routing.key" || string(m.Payload) != `{"legacy":true}` || m.Attempt() != attempt {
			t.Errorf("%s: key %q payload %q attempt %d (want %d)", what, m.Key, m.Payload, m.Attempt(), attempt)
		}
		if len(m.Metadata) != len(want) {
			t.Errorf("%s: metadata\n got %q\nwant %q", what, m.Metadata, want)
		}
		for k, v := range want {
			if m.Metadata[k] != v {
				t.Errorf("%s: metadata[%q] = %q, want %q", what, k, m.Metadata[k], v)
			}
		}
	}
	first := relaytest.Next(t, ch, "foreign message")
	check(first, 1, "first delivery")
	if first.ID == "" {
		t.Fatal("no ID")
	}
	_ = first.Nack()
	second := relaytest.Next(t, ch, "after Nack")
	check(second, 2, "after Nack")
	_ = second.NackAfter(50 * time.Millisecond)
	third := relaytest.Next(t, ch, "after NackAfter")
	check(third, 3, "after NackAfter")
	if second.ID != first.ID || third.ID != first.ID {
		t.Errorf("IDs changed across redeliveries: %s %s %s", first.ID, second.ID, third.ID)
	}
	_ = third.Ack()

	// The metadata of a foreign message can be published again through
	// relay and arrives unchanged (the bridge case).
	pub := openPub(t)
	relaytest.Publish(t, pub, topic, third.Copy())
	again := relaytest.Next(t, ch, "republished through relay")
	check(again, 1, "republished through relay")
	_ = again.Ack()
}

// On quorum queues Attempt is the broker's delivery count: exact across
// Nack, release by a closing subscriber, and NackAfter.
func TestQuorumAttempts(t *testing.T) {
	c := newCleaner(t)
	topic, group := unique("quorum"), unique("g")
	s1 := openSub(t, c, group, "queue_type", "quorum")
	if !s1.Capabilities().AttemptFromBroker {
		t.Errorf("quorum subscriber does not declare AttemptFromBroker")
	}
	relaytest.Provision(t, s1, topic)
	pub := openPub(t)
	m := relay.NewMessage([]byte("q"))
	m.Metadata = relay.Metadata{"k": "v"}
	relaytest.Publish(t, pub, topic, m)

	ch, _ := relaytest.Subscribe(t, s1, topic)
	for attempt := 1; attempt <= 3; attempt++ {
		got := relaytest.Next(t, ch, "quorum delivery")
		if got.ID != m.ID || got.Attempt() != attempt || len(got.Metadata) != 1 || got.Metadata["k"] != "v" {
			t.Fatalf("delivery %d: ID %s attempt %d metadata %q", attempt, got.ID, got.Attempt(), got.Metadata)
		}
		_ = got.Nack()
	}
	held := relaytest.Next(t, ch, "fourth delivery")
	if held.Attempt() != 4 {
		t.Errorf("fourth delivery attempt %d", held.Attempt())
	}
	_ = s1.Close() // released unsettled: the broker counts it

	s2 := openSub(t, c, group, "queue_type", "quorum")
	ch2, _ := relaytest.Subscribe(t, s2, topic)
	got := relaytest.Next(t, ch2, "after release")
	if got.Attempt() != 5 {
		t.Errorf("after release by Close: attempt %d, want 5", got.Attempt())
	}
	_ = got.NackAfter(20 * time.Millisecond)
	got = relaytest.Next(t, ch2, "after NackAfter")
	if got.Attempt() != 6 || len(got.Metadata) != 1 {
		t.Errorf("after NackAfter: attempt %d metadata %q, want 6 and the original", got.Attempt(), got.Metadata)
	}
	_ = got.Ack()
}

// Classic queues with the default nack_mode=republish count Nacks exactly.
func TestClassicAttemptsExact(t *testing.T) {
	c := newCleaner(t)
	topic := unique("classic")
	sub := openSub(t, c, unique("g"))
	relaytest.Provision(t, sub, topic)
	relaytest.Publish(t, openPub(t), topic, relay.NewMessage([]byte("c")))
	ch, _ := relaytest.Subscribe(t, sub, topic)
	for attempt := 1; attempt <= 4; attempt++ {
		got := relaytest.Next(t, ch, "classic delivery")
		if got.Attempt() != attempt {
			t.Fatalf("delivery %d has attempt %d", attempt, got.Attempt())
		}
		if attempt < 4 {
			_ = got.Nack()
		} else {
			_ = got.Ack()
		}
	}
}

// Attempt grows by one with every redelivery on every queue type and nack
// mode, for a release by the end of a subscription (a classic queue does
// not count requeues: without relay's own count it would show 1, 2, 2) and
// for Nack with nack_mode=requeue (1, 2, 2, 2 without it).
func TestAttemptGrowsOnEveryRedelivery(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   []string
	}{
		{"classic", nil},
		{"classic requeue", []string{"nack_mode", "requeue"}},
		{"quorum", []string{"queue_type", "quorum"}},
	} {
		t.Run(tc.name+"/release", func(t *testing.T) {
			c := newCleaner(t)
			topic := unique("attempt-release")
			sub := openSub(t, c, unique("g"), tc.kv...)
			relaytest.Provision(t, sub, topic)
			m := relay.NewMessage([]byte("r"))
			relaytest.Publish(t, openPub(t), topic, m)
			for attempt := 1; attempt <= 3; attempt++ {
				ch, end := relaytest.Subscribe(t, sub, topic)
				got := relaytest.Next(t, ch, "delivery")
				if got.ID != m.ID || got.Attempt() != attempt {
					t.Fatalf("delivery %d: %s attempt %d, want %s attempt %d", attempt, got.ID, got.Attempt(), m.ID, attempt)
				}
				end() // released unsettled
				for range ch {
				}
			}
		})
		t.Run(tc.name+"/nack", func(t *testing.T) {
			c := newCleaner(t)
			topic := unique("attempt-nack")
			sub := openSub(t, c, unique("g"), tc.kv...)
			relaytest.Provision(t, sub, topic)
			m := relay.NewMessage([]byte("n"))
			relaytest.Publish(t, openPub(t), topic, m)
			ch, _ := relaytest.Subscribe(t, sub, topic)
			for attempt := 1; attempt <= 4; attempt++ {
				got := relaytest.Next(t, ch, "delivery")
				if got.ID != m.ID || got.Attempt() != attempt {
					t.Fatalf("delivery %d: %s attempt %d, want %s attempt %d", attempt, got.ID, got.Attempt(), m.ID, attempt)
				}
				if attempt < 4 {
					_ = got.Nack()
				} else {
					_ = got.Ack()
				}
			}
		})
	}
}

// requeue_on_nack=false and delivery_limit move messages to the
// dead-letter exchange, where a relay subscriber of that name gets them.
func TestDeadLetter(t *testing.T) {
	for _, qt := range []string{"classic", "quorum"} {
		t.Run(qt, func(t *testing.T) {
			c := newCleaner(t)
			topic, dlx, group := unique("dl"), unique("dlx"), unique("g")
			c.topic(dlx)
			dead := openSub(t, c, unique("dead"))
			relaytest.Provision(t, dead, dlx)
			deadCh, _ := relaytest.Subscribe(t, dead, dlx)
			pub := openPub(t)

			// No requeue: the first Nack dead-letters.
			noRequeue := openSub(t, c, group, "queue_type", qt, "dead_letter_exchange", dlx, "requeue_on_nack", "false")
			relaytest.Provision(t, noRequeue, topic)
			m := relay.NewMessage([]byte("reject me"))
			m.Metadata = relay.Metadata{"h": "v"}
			relaytest.Publish(t, pub, topic, m)
			ch, cancel := relaytest.Subscribe(t, noRequeue, topic)
			_ = relaytest.Next(t, ch, "to reject").Nack()
			got := relaytest.Next(t, deadCh, "dead-lettered")
			if got.ID != m.ID || got.Metadata["h"] != "v" || got.Metadata["x-death"] == "" {
				t.Errorf("dead-lettered ID %s metadata %q", got.ID, got.Metadata)
			}
			var deaths []map[string]any
			if err := json.Unmarshal([]byte(got.Metadata["x-death"]), &deaths); err != nil || len(deaths) == 0 || deaths[0]["reason"] != "rejected" {
				t.Errorf("x-death %q: %v", got.Metadata["x-death"], err)
			}
			_ = got.Ack()
			cancel()
			_ = noRequeue.Close()

			// Delivery limit 2: attempt 2's Nack dead-letters.
			limited := openSub(t, c, unique("g"), "queue_type", qt, "dead_letter_exchange", dlx, "delivery_limit", "2")
			relaytest.Provision(t, limited, topic)
			m2 := relay.NewMessage([]byte("limited"))
			relaytest.Publish(t, pub, topic, m2)
			ch2, _ := relaytest.Subscribe(t, limited, topic)
			for attempt := 1; attempt <= 2; attempt++ {
				got := relaytest.Next(t, ch2, "limited delivery")
				if got.ID != m2.ID || got.Attempt() != attempt {
					t.Fatalf("limited delivery: %s attempt %d, want %s attempt %d", got.ID, got.Attempt(), m2.ID, attempt)
				}
				_ = got.Nack()
			}
			got = relaytest.Next(t, deadCh, "dead-lettered at the limit")
			if got.ID != m2.ID {
				t.Errorf("dead-lettered %s, want %s", got.ID, m2.ID)
			}
			_ = got.Ack()
			if extra := relaytest.Quiet(ch2, 300*time.Millisecond); extra != nil {
				t.Errorf("message delivered after the limit: attempt %d", extra.Attempt())
			}
		})
	}
}

// A subscriber whose queue exists with other arguments gets a clear error
// at Subscribe, not a silent reconnect loop.
func TestQueueArgumentMismatch(t *testing.T) {
	c := newCleaner(t)
	topic, group := unique("mismatch"), unique("g")
	relaytest.Provision(t, openSub(t, c, group), topic)
	quorum := openSub(t, c, group, "queue_type", "quorum")
	if _, err := quorum.Subscribe(context.Background(), topic); err == nil {
		t.Fatal("Subscribe to a classic queue as quorum succeeded")
	} else {
		t.Logf("error: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := quorum.Provision(ctx, topic); err == nil || ctx.Err() != nil {
		t.Errorf("Provision with mismatching arguments = %v (ctx %v), want an immediate error", err, ctx.Err())
	}
}

// Publish honours ctx while no channel is free, and the state is observable.
func TestPublishContextAndState(t *testing.T) {
	c := newCleaner(t)
	topic := unique("ctx")
	sub := openSub(t, c, unique("g"))
	relaytest.Provision(t, sub, topic)
	pub := openPub(t)
	if pub.State() != amqp.StateConnected || pub.Health() != nil {
		t.Errorf("state %v health %v", pub.State(), pub.Health())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := pub.Publish(ctx, topic, relay.NewMessage(nil)); !errors.Is(err, context.Canceled) {
		t.Errorf("Publish with a cancelled ctx = %v", err)
	}
	_ = pub.Close()
	if pub.State() != amqp.StateClosed {
		t.Errorf("state after Close: %v", pub.State())
	}
}

// Metadata too large for one AMQP content-header frame is refused before
// sending (the broker would close the whole connection); metadata that
// exactly fits is accepted.
func TestMetadataFrameLimit(t *testing.T) {
	c := newCleaner(t)
	topic := unique("frame")
	sub := openSub(t, c, unique("g"))
	relaytest.Provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	pub := openPub(t)

	const frameMax = 131072 // RabbitMQ's default, negotiated by amqp091-go
	id := relay.NewID()
	// content header: 14 fixed + message-id + delivery-mode + table length
	// + one entry (key length, key, type, value length, value)
	fixed := 14 + 1 + len(id) + 1 + 4 + 1 + len("big") + 1 + 4
	fits := &relay.Message{ID: id, Payload: []byte("fits"),
		Metadata: relay.Metadata{"big": strings.Repeat("v", frameMax-8-fixed)}}
	relaytest.Publish(t, pub, topic, fits)
	got := relaytest.Next(t, ch, "largest metadata")
	if got.ID != fits.ID || got.Metadata["big"] != fits.Metadata["big"] {
		t.Errorf("largest metadata did not round-trip")
	}
	_ = got.Ack()

	over := &relay.Message{ID: relay.NewID(), Payload: []byte("over"),
		Metadata: relay.Metadata{"big": strings.Repeat("v", frameMax-8-fixed+1)}}
	err := pub.Publish(context.Background(), topic, over)
	var le *relay.LimitError
	if !errors.Is(err, relay.ErrLimit) || !errors.As(err, &le) || le.MessageID != over.ID || le.What != "metadata size" {
		t.Fatalf("oversized metadata = %v, want a *relay.LimitError about metadata size", err)
	}
	if pub.State() != amqp.StateConnected {
		t.Errorf("state %v after the refused publish", pub.State())
	}
	relaytest.Publish(t, pub, topic, relay.NewMessage([]byte("after")))
	_ = relaytest.Next(t, ch, "after the refused publish").Ack()
}

// Topology deleted under a running publisher and subscriber (an operator's
// mistake): the subscription re-declares its queue and binding and resumes,
// and the publisher re-declares the exchange instead of looping on 404.
func TestTopologyDeletedUnderUs(t *testing.T) {
	c := newCleaner(t)
	topic, group := unique("deleted"), unique("g")
	sub := openSub(t, c, group)
	relaytest.Provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	pub := openPub(t)
	relaytest.Publish(t, pub, topic, relay.NewMessage([]byte("before")))
	_ = relaytest.Next(t, ch, "before").Ack()

	raw := rawChannel(t)
	if _, err := raw.QueueDelete(topic+"."+group, false, false, false); err != nil {
		t.Fatal(err)
	}
	// The broker cancels the consumer; the subscription comes back with a
	// new queue. Publish until a message gets through.
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := relay.NewMessage([]byte("after queue delete"))
		err := pub.Publish(context.Background(), topic, m)
		if err == nil {
			got := relaytest.Next(t, ch, "after queue delete")
			if got.ID != m.ID {
				t.Errorf("got %s, want %s", got.ID, m.ID)
			}
			_ = got.Ack()
			break
		}
		if !errors.Is(err, amqp.ErrUnroutable) {
			t.Fatalf("Publish while the queue is re-declared: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("queue not re-declared within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := raw.ExchangeDelete(topic, false, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := pub.Publish(ctx, topic, relay.NewMessage([]byte("after exchange delete")))
	if !errors.Is(err, amqp.ErrUnroutable) {
		t.Errorf("Publish after the exchange was deleted = %v, want ErrUnroutable (re-declared, unbound)", err)
	}
}

// Concurrent Publish calls sharing one channel each get their own outcome:
// returns are matched to their messages, never to a neighbour's.
func TestUnroutableConcurrentSharedChannel(t *testing.T) {
	c := newCleaner(t)
	routed, unrouted := unique("routed"), unique("unrouted")
	c.topic(unrouted)
	sub := openSub(t, c, unique("g"))
	relaytest.Provision(t, sub, routed)
	pub := openPub(t, "publish_channels", "1")
	const goroutines, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				topic, wantUnroutable := routed, false
				if (g+i)%3 == 0 {
					topic, wantUnroutable = unrouted, true
				}
				batch := []*relay.Message{relay.NewMessage([]byte("x")), relay.NewMessage([]byte("y"))}
				err := pub.Publish(context.Background(), topic, batch...)
				switch {
				case wantUnroutable && !errors.Is(err, amqp.ErrUnroutable):
					errs <- fmt.Errorf("publish to %s = %v, want ErrUnroutable", topic, err)
				case !wantUnroutable && err != nil:
					errs <- fmt.Errorf("publish to %s = %v, want nil", topic, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Names RabbitMQ cannot use are refused up front, with ErrInvalidTopic, by
// Publish, Subscribe and Provision: control characters (a topic with a
// newline would be declared and then retried forever with 404s), invalid
// UTF-8, and names over 255 bytes (for the queue, with the group suffix).
func TestInvalidTopics(t *testing.T) {
	c := newCleaner(t)
	group := unique("g")
	pub := openPub(t)
	sub := openSub(t, c, group)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	long := strings.Repeat("x", 256)
	// Fits an exchange name, but not "<topic>.<group>" plus a delay suffix.
	longForQueue := strings.Repeat("y", 255-len(group))
	bad := map[string]string{
		"newline":         "orders\ncreated",
		"carriage return": "orders\r",
		"NUL":             "a\x00b",
		"unit separator":  "a\x1fb",
		"DEL":             "a\x7f",
		"invalid UTF-8":   "a\xffb",
		"over 255 bytes":  long,
	}
	for name, topic := range bad {
		if err := pub.Publish(ctx, topic, relay.NewMessage([]byte("x"))); !errors.Is(err, relay.ErrInvalidTopic) {
			t.Errorf("%s: Publish = %v, want ErrInvalidTopic", name, err)
		}
	}
	bad["queue name over 255 bytes"] = longForQueue
	for name, topic := range bad {
		if err := sub.Subscriber.Provision(ctx, topic); !errors.Is(err, relay.ErrInvalidTopic) {
			t.Errorf("%s: Provision = %v, want ErrInvalidTopic", name, err)
		}
		ch, err := sub.Subscriber.Subscribe(ctx, topic)
		if !errors.Is(err, relay.ErrInvalidTopic) {
			t.Errorf("%s: Subscribe = %v, want ErrInvalidTopic", name, err)
		}
		if ch != nil {
			t.Errorf("%s: Subscribe returned a channel", name)
		}
	}
	// A tab is a control character too; a plain space and non-ASCII letters are fine.
	if err := pub.Publish(ctx, "a\tb", relay.NewMessage(nil)); !errors.Is(err, relay.ErrInvalidTopic) {
		t.Errorf("tab: Publish = %v, want ErrInvalidTopic", err)
	}
	ok := unique("commandes reçues")
	relaytest.Provision(t, sub, ok)
	relaytest.Publish(t, pub, ok, relay.NewMessage([]byte("ok")))
}

// A nil and an empty Payload travel the same way: a present 0-byte body
// (a raw AMQP consumer sees two identical empty bodies), and a relay
// subscriber gets a non-nil empty Payload for both.
func TestNilAndEmptyPayload(t *testing.T) {
	c := newCleaner(t)
	topic := unique("empty")
	sub := openSub(t, c, unique("g"))
	relaytest.Provision(t, sub, topic)

	raw := rawChannel(t)
	q, err := raw.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.QueueBind(q.Name, "", topic, false, nil); err != nil {
		t.Fatal(err)
	}
	rawDels, err := raw.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	nilMsg := relay.NewMessage(nil)
	emptyMsg := relay.NewMessage([]byte{})
	relaytest.Publish(t, openPub(t), topic, nilMsg, emptyMsg)

	for _, want := range []string{nilMsg.ID, emptyMsg.ID} {
		select {
		case d := <-rawDels:
			if d.MessageId != want || d.Body == nil || len(d.Body) != 0 {
				t.Errorf("raw delivery %s body %#v, want %s with a present empty body", d.MessageId, d.Body, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("raw consumer: no delivery of %s", want)
		}
	}
	ch, _ := relaytest.Subscribe(t, sub, topic)
	for _, want := range []string{nilMsg.ID, emptyMsg.ID} {
		got := relaytest.Next(t, ch, "empty payload")
		if got.ID != want || got.Payload == nil || len(got.Payload) != 0 {
			t.Errorf("delivered %s payload %#v, want %s with non-nil empty payload", got.ID, got.Payload, want)
		}
		_ = got.Ack()
	}
}

// TestAdaptiveWindow: with inflight= unset, a subscription whose handler
// keeps up with a backlog grows its window from DefaultInFlight, and the
// broker's prefetch follows it on the running consumer: more than
// DefaultInFlight deliveries reach a handler that then stops acking.
func TestAdaptiveWindow(t *testing.T) {
	c := newCleaner(t)
	topic, group := unique("adaptive"), unique("g")
	sub := openSub(t, c, group)
	relaytest.Provision(t, sub, topic)
	relaytest.WindowGrows(t, openPub(t), sub, topic,
		relaytest.WindowCase{N: 3100, Acked: 2000, Start: amqp.DefaultInFlight, Max: driver.DefaultMaxInFlight})
}

// TestAdaptiveWindowBoundsTheBroker: while an adaptive window has not
// grown, the broker holds back what it does not cover: a handler that
// acks nothing has DefaultInFlight deliveries unacked at the broker and
// the rest of the backlog still ready in the queue, not the largest
// window's worth pushed to the client.
func TestAdaptiveWindowBoundsTheBroker(t *testing.T) {
	const n = 600
	topic, group, _, ch := subscribedBacklog(t, "adaptive-held", n)
	held := 0
	for m := relaytest.Quiet(ch, time.Second); m != nil; m = relaytest.Quiet(ch, time.Second) {
		held++
	}
	if held != amqp.DefaultInFlight {
		t.Fatalf("%d messages delivered to a handler that acks none, want the starting window %d", held, amqp.DefaultInFlight)
	}
	q, err := rawChannel(t).QueueDeclarePassive(topic+"."+group, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := n - amqp.DefaultInFlight; q.Messages != want {
		t.Fatalf("%d messages ready in the queue, want %d: the broker pushed %d deliveries for a window of %d",
			q.Messages, want, n-q.Messages, amqp.DefaultInFlight)
	}
}

// TestAdaptiveWindowWithoutChannelLimit: a broker that refuses a
// channel's prefetch limit (RabbitMQ 4.3 and later by default) closes the
// channel; the subscription opens another with the consumer's own count
// at its window and consumes the whole backlog, each message once.
func TestAdaptiveWindowWithoutChannelLimit(t *testing.T) {
	refused := 0
	var mu sync.Mutex
	defer amqp.SetQosGlobal(func(ch *amqp091.Channel, _ int) error {
		mu.Lock()
		refused++
		mu.Unlock()
		_ = ch.Close() // as the broker does with a method it refuses
		return &amqp091.Error{Code: amqp091.InternalError, Server: true, Reason: "INTERNAL_ERROR - Feature `global_qos` is deprecated"}
	})()
	const n = 500
	_, _, msgs, ch := subscribedBacklog(t, "no-global", n)
	seen := map[string]bool{}
	for i := range n {
		m := relaytest.Next(t, ch, fmt.Sprintf("message %d", i))
		if seen[m.ID] {
			t.Fatalf("message %s delivered twice", m.ID)
		}
		seen[m.ID] = true
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range msgs {
		if !seen[m.ID] {
			t.Fatalf("message %s not delivered", m.ID)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if refused != 1 {
		t.Errorf("the channel limit was asked for %d times, want once (then never again)", refused)
	}
}

// subscribedBacklog publishes n messages to a new topic, provisioned for
// a new group whose subscriber (at the defaults: an adaptive window) is
// then subscribed; the subscription ends with t.
func subscribedBacklog(t *testing.T, prefix string, n int) (topic, group string, msgs []*relay.Message, ch <-chan *relay.Message) {
	t.Helper()
	c := newCleaner(t)
	topic, group = unique(prefix), unique("g")
	c.pair(topic, group)
	sub := openSub(t, c, group)
	relaytest.Provision(t, sub, topic)
	msgs = make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage(fmt.Appendf(nil, "m%d", i))
	}
	relaytest.Publish(t, openPub(t), topic, msgs...)
	ch, cancel := relaytest.Subscribe(t, sub, topic)
	t.Cleanup(cancel)
	return topic, group, msgs, ch
}
