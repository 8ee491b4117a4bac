package nats_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
	relaynats "github.com/go-relay/relay/adapters/nats"
)

func newName(prefix string) string { return prefix + strconv.FormatUint(rand.Uint64(), 36) }

// receive takes n messages from ch, acking each.
func receive(t *testing.T, ch <-chan *relay.Message, n int) []*relay.Message {
	t.Helper()
	var got []*relay.Message
	timeout := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %d of %d messages", len(got), n)
			}
			if err := m.Ack(); err != nil {
				t.Fatalf("Ack: %v", err)
			}
			got = append(got, m)
		case <-timeout:
			t.Fatalf("received %d of %d messages within 30s", len(got), n)
		}
	}
	return got
}

func deleteStream(t *testing.T, js jetstream.JetStream, name string) {
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
}

// A plain nats.go publisher's messages (random headers, repeated ones,
// random bodies, with and without Nats-Msg-Id) are all delivered: payload
// byte-exact, headers as metadata, repeats numbered, and the ID from
// Nats-Msg-Id or else "nats:STREAM:SEQ".
func TestPlainPublisherDelivered(t *testing.T) {
	_, js := rawJS(t)
	topic, group := newName("plain."), newName("g")
	deleteStream(t, js, relaynats.StreamName(topic))
	sub := openSub(t, group)
	if err := sub.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 50
	type sent struct {
		id   string
		md   relay.Metadata
		body []byte
	}
	var want []sent
	ctx := context.Background()
	for i := range n {
		body := make([]byte, rng.IntN(2000))
		for j := range body {
			body[j] = byte(rng.UintN(256))
		}
		msg := &natsgo.Msg{Subject: topic, Data: body, Header: natsgo.Header{}}
		md := relay.Metadata{}
		for k := range rng.IntN(4) {
			name := fmt.Sprintf("X-Hdr-%d", k)
			vals := 1 + rng.IntN(3)
			for v := range vals {
				val := fmt.Sprintf("v%d-%d-%x", i, v, rng.Uint32())
				msg.Header.Add(name, val)
				if v == 0 {
					md[name] = val
				} else {
					md[name+"#"+strconv.Itoa(v+1)] = val
				}
			}
		}
		id := ""
		if i%2 == 0 {
			id = fmt.Sprintf("foreign-%d", i)
			msg.Header.Set(jetstream.MsgIDHeader, id)
		}
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		if id == "" {
			id = fmt.Sprintf("nats:%s:%d", relaynats.StreamName(topic), ack.Sequence)
		}
		if len(md) == 0 {
			md = nil
		}
		want = append(want, sent{id, md, body})
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(sctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, ch, n)
	for i, m := range got {
		w := want[i]
		if m.ID != w.id || !bytes.Equal(m.Payload, w.body) || !reflect.DeepEqual(m.Metadata, w.md) {
			t.Errorf("message %d: got ID %q metadata %q payload %d bytes; want %q %q %d bytes", i, m.ID, m.Metadata, len(m.Payload), w.id, w.md, len(w.body))
		}
		if m.Attempt() != 1 {
			t.Errorf("message %d: Attempt %d", i, m.Attempt())
		}
	}
}

// Metadata, ID and Key that no NATS header can carry as they are still
// come back byte-exact through the server.
func TestOddHeadersRoundTripThroughServer(t *testing.T) {
	_, js := rawJS(t)
	topic := newName("odd.")
	deleteStream(t, js, relaynats.StreamName(topic))
	sub := openSub(t, newName("g"))
	pub := openPub(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := &relay.Message{
		ID:  " id\r\n\x00 ",
		Key: " ключ ",
		Metadata: relay.Metadata{
			"a/b:c": " x ", "": "", "ü": "\xff", "Nats-Msg-Id": "md", "plain": "value with spaces",
		},
		Payload: []byte{0, 0xff},
	}
	if err := pub.Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	got := receive(t, ch, 1)[0]
	if got.ID != m.ID || got.Key != m.Key || !reflect.DeepEqual(got.Metadata, m.Metadata) || !bytes.Equal(got.Payload, m.Payload) {
		t.Fatalf("got %q %q %q %q\nwant %q %q %q %q", got.ID, got.Key, got.Metadata, got.Payload, m.ID, m.Key, m.Metadata, m.Payload)
	}
}

// Publishing the same message ID twice within the duplicate window stores
// one message: a retried Publish is not delivered twice.
func TestDuplicatePublishStoredOnce(t *testing.T) {
	_, js := rawJS(t)
	topic := newName("dup.")
	deleteStream(t, js, relaynats.StreamName(topic))
	pub := openPub(t)
	ctx := context.Background()
	m := relay.NewMessage([]byte("once"))
	for range 3 {
		if err := pub.Publish(ctx, topic, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Publish(ctx, topic, relay.NewMessage([]byte("other"))); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, relaynats.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages after publishing one ID three times and another once, want 2", info.State.Msgs)
	}
}

// The size limit is the server's max_payload, headers included, checked
// before anything is sent.
func TestMaxPayload(t *testing.T) {
	nc, js := rawJS(t)
	pub := openPub(t)
	caps := pub.(relay.CapabilityReporter).Capabilities()
	if caps.MaxMessageBytes != int(nc.MaxPayload()) {
		t.Fatalf("MaxMessageBytes = %d, server max_payload = %d", caps.MaxMessageBytes, nc.MaxPayload())
	}
	topic := newName("big.")
	deleteStream(t, js, relaynats.StreamName(topic))
	m := relay.NewMessage(make([]byte, caps.MaxMessageBytes-10))
	var le *relay.LimitError
	if err := pub.Publish(context.Background(), topic, m); !errors.As(err, &le) {
		t.Fatalf("Publish of a payload that fits only without headers = %v, want *relay.LimitError", err)
	}
	ok := relay.NewMessage(make([]byte, caps.MaxMessageBytes-200))
	if err := pub.Publish(context.Background(), topic, ok); err != nil {
		t.Fatalf("Publish of a message within max_payload: %v", err)
	}
}

func TestInvalidTopic(t *testing.T) {
	pub := openPub(t)
	for _, topic := range []string{"a.*", "a..b", "a b"} {
		if err := pub.Publish(context.Background(), topic, relay.NewMessage(nil)); !errors.Is(err, relay.ErrInvalidTopic) {
			t.Errorf("Publish to %q = %v, want ErrInvalidTopic", topic, err)
		}
	}
}

// With stream= the adapter uses a stream the user created (one for
// several topics) and creates only the group's consumer, filtered to the
// topic.
func TestUserManagedStream(t *testing.T) {
	_, js := rawJS(t)
	ctx := context.Background()
	base := newName("um")
	stream := "USER_" + base
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{base + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	deleteStream(t, js, stream)
	a, b := base+".a", base+".b"
	pub := openPub(t, "stream", stream)
	sub := openSub(t, "g", "stream", stream)
	if err := pub.Publish(ctx, a, relay.NewMessage([]byte("to a"))); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, b, relay.NewMessage([]byte("to b"))); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(sctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := receive(t, ch, 1)[0]; string(got.Payload) != "to b" {
		t.Fatalf("subscription of %s got %q", b, got.Payload)
	}
	if _, err := js.Consumer(ctx, stream, relaynats.ConsumerName("g_"+b)); err != nil {
		t.Fatalf("consumer of group g on topic %s: %v", b, err)
	}
	if _, err := js.Stream(ctx, relaynats.StreamName(a)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the adapter created its own stream despite stream=: %v", err)
	}
	bad := openSub(t, "g", "stream", "NO_SUCH_"+base)
	if err := bad.(relay.Provisioner).Provision(ctx, a); err == nil {
		t.Fatal("Provision against a missing stream= succeeded")
	}
}

// Lag counts what the group has not acknowledged: undelivered plus
// delivered-unacked; before the group exists, the topic's messages.
func TestLag(t *testing.T) {
	_, js := rawJS(t)
	ctx := context.Background()
	topic := newName("lag.")
	deleteStream(t, js, relaynats.StreamName(topic))
	sub := openSub(t, newName("g"))
	lr := sub.(relay.LagReporter)
	if n, err := lr.Lag(ctx, topic); err != nil || n != 0 {
		t.Fatalf("Lag without a stream = %d, %v; want 0", n, err)
	}
	pub := openPub(t)
	for i := range 5 {
		if err := pub.Publish(ctx, topic, relay.NewMessage([]byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := lr.Lag(ctx, topic); err != nil || n != 5 {
		t.Fatalf("Lag before the group exists = %d, %v; want 5", n, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(sctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, ch, 2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := lr.Lag(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lag after acking 2 of 5 = %d, want 3", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Attempt is the server's delivery count: a Nack brings the message back
// with Attempt 2, and a new subscription of the group (another
// connection) continues the count.
func TestAttemptFromServer(t *testing.T) {
	_, js := rawJS(t)
	ctx := context.Background()
	topic, group := newName("att."), newName("g")
	deleteStream(t, js, relaynats.StreamName(topic))
	pub := openPub(t)
	sub := openSub(t, group)
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, topic, relay.NewMessage([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	ch, err := sub.Subscribe(sctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if err := first.Nack(); err != nil {
		t.Fatal(err)
	}
	second := <-ch
	if second.ID != first.ID || first.Attempt() != 1 || second.Attempt() != 2 {
		t.Fatalf("after a Nack: ID %q Attempt %d, first %q Attempt %d; want the same ID, attempts 1 and 2", second.ID, second.Attempt(), first.ID, first.Attempt())
	}
	if err := second.Nack(); err != nil {
		t.Fatal(err)
	}
	third := <-ch
	cancel()
	for range ch {
	}
	if third.Attempt() != 3 {
		t.Fatalf("third delivery has Attempt %d", third.Attempt())
	}
	other := openSub(t, group)
	ch2, err := other.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	// The released message comes back to the new subscription counting
	// on; a redelivery the server sent to the ended subscription's
	// pending pull request and took back is not counted.
	if got := receive(t, ch2, 1)[0]; got.Attempt() < 3 || got.ID != first.ID {
		t.Fatalf("after the subscription ended: ID %q Attempt %d, want %q and at least 3", got.ID, got.Attempt(), first.ID)
	}
}

// With the caller's connection, relay works through it and Close leaves
// it open.
func TestCallerOwnedConnection(t *testing.T) {
	nc, js := rawJS(t)
	ctx := context.Background()
	topic := newName("own.")
	deleteStream(t, js, relaynats.StreamName(topic))
	sc := relaynats.StreamConfig{Storage: relaynats.StorageMemory}
	pub, err := relaynats.NewPublisher(nc, sc)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := relaynats.NewSubscriber(nc, sc, relaynats.SubscriberConfig{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(sctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage([]byte("x"))
	if err := pub.Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, ch, 1)[0]; got.ID != m.ID {
		t.Fatalf("got %q", got.ID)
	}
	s, err := js.Stream(ctx, relaynats.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	if st := s.CachedInfo().Config.Storage; st != jetstream.MemoryStorage {
		t.Errorf("stream storage %v, want memory from the StreamConfig", st)
	}
	_ = sub.Close()
	_ = pub.Close()
	if !nc.IsConnected() {
		t.Fatal("Close closed the caller's connection")
	}
	if _, err := relaynats.NewSubscriber(nc, relaynats.StreamConfig{}, relaynats.SubscriberConfig{}); err == nil {
		t.Error("NewSubscriber without a Group succeeded")
	}
}

// A message the server rejects fails alone: the batch's others are
// stored, and the error is a *relay.PublishError naming just that one.
func TestPartialPublishFailure(t *testing.T) {
	_, js := rawJS(t)
	ctx := context.Background()
	base := newName("part")
	stream := "USER_" + base
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{base}, Storage: jetstream.MemoryStorage, MaxMsgSize: 500}); err != nil {
		t.Fatal(err)
	}
	deleteStream(t, js, stream)
	pub := openPub(t, "stream", stream)
	small1, big, small2 := relay.NewMessage([]byte("a")), relay.NewMessage(make([]byte, 1000)), relay.NewMessage([]byte("b"))
	err := pub.Publish(ctx, base, small1, big, small2)
	var pe *relay.PublishError
	if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0].ID != big.ID {
		t.Fatalf("Publish = %v, want a *relay.PublishError naming only %s", err, big.ID)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want the 2 small ones", info.State.Msgs)
	}
}
