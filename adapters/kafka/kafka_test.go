package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/kafka"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestRoundTrip runs with copied payloads (the default) and with
// share_payloads=true, whose messages share franz-go's fetch buffers.
func TestRoundTrip(t *testing.T) {
	c := newCluster(t)
	for _, share := range []string{"false", "true"} {
		t.Run("share_payloads="+share, func(t *testing.T) { testRoundTrip(t, c, share) })
	}
}

func testRoundTrip(t *testing.T, c *cluster, share string) {
	topic := unique("rt")
	pub := relaytest.OpenPublisher(t, c.url("partitions", "3"))
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g"), "share_payloads", share))

	big := bytes.Repeat([]byte{0, 1, 2, 0xff}, 200_000) // 800 kB
	msgs := []*relay.Message{
		{ID: "id-1", Key: "k1", Metadata: relay.Metadata{"a": "1", "relay-id": "spoof", "relay-md-x": "y", "": "empty name"}, Payload: []byte("hello")},
		{ID: "id-2", Payload: nil},
		{ID: "id-3", Key: "k1", Payload: []byte{0, 0, 0}},
		{ID: "id-4", Payload: big},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pub.Publish(ctx, topic, msgs...); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*relay.Message{}
	for len(got) < len(msgs) {
		m := recv(t, ch)
		if m.Attempt() != 1 || m.Topic() != topic {
			t.Fatalf("attempt %d topic %q", m.Attempt(), m.Topic())
		}
		got[m.ID] = m
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range msgs {
		m := got[want.ID]
		if m == nil {
			t.Fatalf("missing %s", want.ID)
		}
		if m.Key != want.Key || !bytes.Equal(m.Payload, want.Payload) || len(m.Metadata) != len(want.Metadata) {
			t.Fatalf("%s: got key %q payload %d bytes md %v", want.ID, m.Key, len(m.Payload), m.Metadata)
		}
		for k, v := range want.Metadata {
			if m.Metadata[k] != v {
				t.Fatalf("%s: metadata %q = %q, want %q", want.ID, k, m.Metadata[k], v)
			}
		}
	}
}

func TestForeignRecords(t *testing.T) {
	c := newCluster(t)
	topic := unique("foreign")
	c.createTopic(t, topic, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := []*kgo.Record{
		{Value: []byte("plain")},
		{Value: []byte("odd"), Key: []byte{0xff, 0xfe}, Headers: []kgo.RecordHeader{{Key: "relay-id", Value: nil}, {Key: "h", Value: []byte{0xc3}}, {Key: "h", Value: []byte("second")}}},
		{Value: []byte("with id"), Headers: []kgo.RecordHeader{{Key: "relay-id", Value: []byte("given")}, {Key: "relay-other", Value: []byte("x")}}},
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g")))
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kafka:" + topic + ":0:0", "kafka:" + topic + ":0:1", "given"}
	for i, id := range want {
		m := recv(t, ch)
		if m.ID != id {
			t.Fatalf("record %d: id %q, want %q", i, m.ID, id)
		}
		_ = m.Ack()
		switch i {
		case 1:
			if m.Key != "\xff\xfe" || m.Metadata["h"] != "\xc3" || m.Metadata["h#2"] != "second" {
				t.Fatalf("odd record: key %q md %v", m.Key, m.Metadata)
			}
		case 2:
			if m.Metadata["relay-other"] != "x" {
				t.Fatalf("foreign relay- header lost: %v", m.Metadata)
			}
		}
	}
}

// TestCommitRule acks every record of a partition but one; the committed
// offset must stop right before it, and a new member of the group gets
// that record and everything after it (acked or not) again.
func TestCommitRule(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("commit"), unique("g")
	c.createTopic(t, topic, 1)
	pub := relaytest.OpenPublisher(t, c.url())
	msgs := publishN(t, pub, topic, 20, nil)

	sub := relaytest.OpenSubscriber(t, c.subURL(group, "inflight", "20"))
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var held *relay.Message
	var got []*relay.Message
	for len(got) < 20 {
		got = append(got, recv(t, ch))
	}
	// Ack in reverse order, except offset 11.
	for i := 19; i >= 0; i-- {
		if got[i].ID != msgs[i].ID {
			t.Fatalf("order: got %s at %d, want %s", got[i].ID, i, msgs[i].ID)
		}
		if i == 11 {
			held = got[i]
			continue
		}
		if err := got[i].Ack(); err != nil {
			t.Fatal(err)
		}
	}
	cancel() // ends the subscription
	for range ch {
	}
	if err := held.Ack(); !errors.Is(err, relay.ErrSubscriptionEnded) {
		t.Fatalf("ack after the end: %v, want ErrSubscriptionEnded", err)
	}
	// Close returns after the final commit and leaving the group.
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if off := c.committed(t, group, topic); off[0] != 11 {
		t.Fatalf("committed %v, want partition 0 at 11", off)
	}

	// The next member resumes at 11: 11 to 19 again.
	sub = relaytest.OpenSubscriber(t, c.subURL(group, "inflight", "20"))
	ch2, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 11; i < 20; i++ {
		m := recv(t, ch2)
		if m.ID != msgs[i].ID {
			t.Fatalf("redelivery %d: got %s (%s), want %s", i, m.ID, m.Payload, msgs[i].ID)
		}
		if i == 11 && m.Attempt() != 2 {
			t.Fatalf("attempt of the released record: %d, want 2 (counted in process)", m.Attempt())
		}
		_ = m.Ack()
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if off := c.committed(t, group, topic); off[0] != 20 {
		t.Fatalf("committed %v after acking all, want 20", off)
	}
}

func TestNackRedelivery(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("nack"), unique("g")
	c.createTopic(t, topic, 1)
	pub := relaytest.OpenPublisher(t, c.url())
	msgs := publishN(t, pub, topic, 3, nil)
	sub := relaytest.OpenSubscriber(t, c.subURL(group))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	first := recv(t, ch)
	if first.ID != msgs[0].ID {
		t.Fatalf("got %s", first.ID)
	}
	// Ack 1 and 2, nack 0 twice (once delayed): it comes back with
	// attempts 2 and 3, and the commit stays at 0 until it is acked.
	for i := 1; i < 3; i++ {
		if err := recv(t, ch).Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Nack(); err != nil {
		t.Fatal(err)
	}
	again := recv(t, ch)
	if again.ID != msgs[0].ID || again.Attempt() != 2 || !bytes.Equal(again.Payload, msgs[0].Payload) {
		t.Fatalf("redelivery: %s attempt %d", again.ID, again.Attempt())
	}
	if err := again.NackAfter(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	third := recv(t, ch)
	if third.ID != msgs[0].ID || third.Attempt() != 3 {
		t.Fatalf("delayed redelivery: %s attempt %d", third.ID, third.Attempt())
	}
	if off := c.committed(t, group, topic); off[0] > 0 {
		t.Fatalf("committed %v past the nacked record", off)
	}
	if err := third.Ack(); err != nil {
		t.Fatal(err)
	}
	cancel()
	for range ch {
	}
	_ = sub.Close()
	if off := c.committed(t, group, topic); off[0] != 3 {
		t.Fatalf("committed %v, want 3", off)
	}
}

func TestPublishErrors(t *testing.T) {
	c := newCluster(t)
	pub := relaytest.OpenPublisher(t, c.url("max_bytes", "1000"))
	ctx := context.Background()

	err := pub.Publish(ctx, "bad topic!", relay.NewMessage(nil))
	if !errors.Is(err, relay.ErrInvalidTopic) {
		t.Fatalf("bad topic: %v", err)
	}
	big := relay.NewMessage(make([]byte, 1000))
	err = pub.Publish(ctx, unique("t"), relay.NewMessage([]byte("ok")), big)
	var le *relay.LimitError
	if !errors.As(err, &le) || le.MessageID != big.ID || !errors.Is(err, relay.ErrMessageTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	// The size bound counts headers too.
	md := relay.NewMessage([]byte("x"))
	md.Metadata = relay.Metadata{"k": string(make([]byte, 950))}
	if err := pub.Publish(ctx, unique("t"), md); !errors.Is(err, relay.ErrMessageTooLarge) {
		t.Fatalf("metadata counted: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := pub.Publish(cctx, unique("t"), relay.NewMessage(nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	_ = pub.Close()
	if err := pub.Publish(ctx, unique("t"), relay.NewMessage(nil)); !errors.Is(err, relay.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestNoCreateTopics(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub := relaytest.OpenPublisher(t, c.url("create_topics", "false", "delivery_timeout", "2s"))
	if err := pub.Publish(ctx, unique("missing"), relay.NewMessage(nil)); err == nil {
		t.Fatal("publish to a missing topic succeeded with create_topics=false")
	}
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g"), "create_topics", "false"))
	if _, err := sub.Subscribe(ctx, unique("missing")); !errors.Is(err, relay.ErrInvalidTopic) {
		t.Fatalf("subscribe to a missing topic: %v", err)
	}
}

// TestStartLatest: with start=latest, Provision fixes a new group's
// position: messages published before it are skipped, after it kept.
func TestStartLatest(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("latest"), unique("g")
	pub := relaytest.OpenPublisher(t, c.url("partitions", "2"))
	before := publishN(t, pub, topic, 5, func(i int) string { return fmt.Sprint(i) })
	_ = before
	sub := relaytest.OpenSubscriber(t, c.subURL(group, "start", "latest"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	after := publishN(t, pub, topic, 5, func(i int) string { return fmt.Sprint(i) })
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range after {
		m := recv(t, ch)
		ids = append(ids, m.ID)
		_ = m.Ack()
	}
	var want []string
	for _, m := range after {
		want = append(want, m.ID)
	}
	sort.Strings(ids)
	sort.Strings(want)
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", ids, want)
	}

	// earliest (default): a group provisioned later still gets everything.
	sub2 := relaytest.OpenSubscriber(t, c.subURL(unique("g")))
	if err := sub2.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	ch2, err := sub2.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		_ = recv(t, ch2).Ack()
	}
}

// TestMaxUncommitted: while the first record of a partition is unacked,
// fetching pauses once max_uncommitted records are held behind it (memory
// stays bounded); acking it resumes the partition.
func TestMaxUncommitted(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("window"), unique("g")
	c.createTopic(t, topic, 1)
	pub := relaytest.OpenPublisher(t, c.url("compression", "none"))
	const n = 3000
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage(bytes.Repeat([]byte{byte(i)}, 10_000))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < n; i += 500 {
		if err := pub.Publish(ctx, topic, msgs[i:i+500]...); err != nil {
			t.Fatal(err)
		}
	}
	defer kafka.SetStuckGrace(0)()
	sub := relaytest.OpenSubscriber(t, c.subURL(group, "inflight", "50", "max_uncommitted", "20"))
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	first := recv(t, ch)
	if first.ID != msgs[0].ID {
		t.Fatalf("first %s", first.ID)
	}
	delivered := 1
	seen := map[string]bool{first.ID: true}
	stalled := false
	for !stalled {
		select {
		case m := <-ch:
			_ = m.Ack()
			seen[m.ID] = true
			delivered++
		case <-time.After(time.Second):
			stalled = true
		}
	}
	if delivered >= n {
		t.Fatalf("all %d records delivered while the first was held", delivered)
	}
	t.Logf("%d of %d delivered while the first record was held", delivered, n)
	if err := first.Ack(); err != nil {
		t.Fatal(err)
	}
	for delivered < n {
		m := recv(t, ch)
		if seen[m.ID] {
			t.Fatalf("%s delivered twice", m.ID)
		}
		seen[m.ID] = true
		_ = m.Ack()
		delivered++
	}
	if len(seen) != n {
		t.Fatalf("%d distinct of %d", len(seen), n)
	}
}

// TestAdaptiveWindow: a subscription whose URL sets no inflight= starts at
// DefaultInFlight unsettled messages and, while its handler keeps up with
// a backlog, grows its window (up to driver.DefaultMaxInFlight): once the
// handler stops acking, more than DefaultInFlight messages reach it.
func TestAdaptiveWindow(t *testing.T) {
	c := newCluster(t)
	topic := unique("adaptive")
	c.createTopic(t, topic, 1)
	relaytest.WindowGrows(t, relaytest.OpenPublisher(t, c.url()), relaytest.OpenSubscriber(t, c.subURL(unique("g"))), topic,
		relaytest.WindowCase{N: 6000, Acked: 4000, Start: kafka.DefaultInFlight, Max: driver.DefaultMaxInFlight})
}

// TestHealth: nil while the cluster answers, an error once it is gone.
func TestHealth(t *testing.T) {
	c := newCluster(t)
	c.needFake(t)
	topic := unique("health")
	pub := relaytest.OpenPublisher(t, c.url())
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g")))
	publishN(t, pub, topic, 1, nil)
	ph, sh := pub.(relay.HealthChecker), sub.(relay.HealthChecker)
	if err := ph.Health(); err != nil {
		t.Fatalf("publisher health: %v", err)
	}
	if err := sub.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	if err := sh.Health(); err != nil {
		t.Fatalf("subscriber health: %v", err)
	}
	c.fake.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = pub.Publish(ctx, topic, relay.NewMessage(nil))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	_ = sub.(relay.Provisioner).Provision(ctx2, topic)
	if ph.Health() == nil || sh.Health() == nil {
		t.Fatalf("health with the cluster gone: publisher %v, subscriber %v", ph.Health(), sh.Health())
	}
}

// A nacked record is redelivered from this process. By default each
// delivery is a copy of the record as fetched, so a handler's in-place
// change never reaches the redelivery; with share_payloads=true the
// deliveries share the fetched bytes, so the change is seen again, as
// docs/kafka.md warns (and which shows that the option is in effect).
func TestNackRedeliveryAfterInPlaceChange(t *testing.T) {
	c := newCluster(t)
	for _, tc := range []struct{ share, want string }{{"false", "original"}, {"true", "Xriginal"}} {
		t.Run("share_payloads="+tc.share, func(t *testing.T) {
			topic := unique("inplace")
			c.createTopic(t, topic, 1)
			pub := relaytest.OpenPublisher(t, c.url())
			if err := pub.Publish(context.Background(), topic, relay.NewMessage([]byte("original"))); err != nil {
				t.Fatal(err)
			}
			sub := relaytest.OpenSubscriber(t, c.subURL(unique("g"), "share_payloads", tc.share))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch, err := sub.Subscribe(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			first := recv(t, ch)
			first.Payload[0] = 'X'
			if err := first.Nack(); err != nil {
				t.Fatal(err)
			}
			again := recv(t, ch)
			if again.ID != first.ID || again.Attempt() != 2 || string(again.Payload) != tc.want {
				t.Fatalf("redelivery: %s attempt %d payload %q, want %q", again.ID, again.Attempt(), again.Payload, tc.want)
			}
			if err := again.Ack(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
