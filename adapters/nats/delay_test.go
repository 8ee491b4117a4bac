package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestDelayedHeldByNak: a delayed message is in the stream at once, with
// its due time in the relay-deliver-at header; the subscription holds it
// with NakWithDelay and delivers it when due, without the header and
// with Attempt 1 although JetStream counted the held delivery; a Nack
// then brings Attempt 2.
func TestDelayedHeldByNak(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("delay"), relaytest.Unique("g")
	t.Cleanup(func() { deleteStreamOf(natsURL(t), topic) })
	sub := openSub(t, group)
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	pub := openPub(t)
	m := relay.NewMessage([]byte("later")).DeliverAfter(800 * time.Millisecond)
	m.Metadata = relay.Metadata{"k": "v"}
	if err := pub.Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	got := recv(t, ch)
	at := time.Now()
	if got.ID != m.ID || m.DeliverAt.Sub(at) > 2*time.Millisecond {
		t.Fatalf("got %s %v before due", got.ID, m.DeliverAt.Sub(at))
	}
	if _, ok := got.Metadata[driver.DeliverAtHeader]; ok || got.Metadata["k"] != "v" || len(got.Metadata) != 1 {
		t.Errorf("delivered metadata %v, want only k=v", got.Metadata)
	}
	if got.Attempt() != 1 {
		t.Errorf("Attempt %d on the first delivery to the consumer, want 1", got.Attempt())
	}
	if err := got.Nack(); err != nil {
		t.Fatal(err)
	}
	again := recv(t, ch)
	if again.ID != m.ID || again.Attempt() != 2 {
		t.Errorf("after Nack: %s attempt %d, want %s attempt 2", again.ID, again.Attempt(), m.ID)
	}
	_ = again.Ack()
}

func recv(t *testing.T, ch <-chan *relay.Message) *relay.Message {
	t.Helper()
	return relaytest.Next(t, ch, "the next message")
}

func BenchmarkDelayLateness(b *testing.B) {
	var topics []string
	b.Cleanup(func() {
		for _, topic := range topics {
			deleteStreamOf(natsURL(b), topic)
		}
	})
	drivertest.BenchmarkDelayLateness(b, drivertest.Harness{
		NewTopic: func(testing.TB) string {
			topic := relaytest.Unique("bench-delay")
			topics = append(topics, topic)
			return topic
		},
		NewPublisher:  func(t testing.TB) relay.Publisher { return openPub(t) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return openSub(t, group) },
	})
}
