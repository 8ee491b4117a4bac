package amqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/internal/relaytest"
)

// TestDueTopology: a delayed publish declares the topic's due exchange and
// the due queue of its bucket, which DueTopology lists; a due queue deleted
// by hand makes the next delayed publish fail as unroutable (nothing is
// lost silently), and the one after declares it again and goes through.
func TestDueTopology(t *testing.T) {
	ctx := context.Background()
	c := newCleaner(t)
	topic := unique("due")
	sub := openSub(t, c, unique("g"))
	relaytest.Provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	pub := openPub(t)
	raw := rawChannel(t)

	first := relay.NewMessage([]byte("1")).DeliverAfter(300 * time.Millisecond)
	if err := pub.Publish(ctx, topic, first); err != nil {
		t.Fatal(err)
	}
	dx, queues := amqp.DueTopology(topic)
	if _, err := raw.QueueDeclarePassive(topic+".relay-due-305ms", true, false, false, false, nil); err != nil {
		t.Fatalf("the due queue of a 300ms delay (bucket ⌈2^(33/4)⌉ = 305ms) is not there: %v", err)
	}
	listed := false
	for _, q := range queues {
		listed = listed || q == topic+".relay-due-305ms"
	}
	if dx != topic+".relay-due" || !listed {
		t.Errorf("DueTopology(%q) = %q and %d queues, not naming the queue used", topic, dx, len(queues))
	}
	if got := relaytest.Next(t, ch, "the first delayed message"); got.ID != first.ID {
		t.Fatalf("got %s, want %s", got.ID, first.ID)
	} else {
		_ = got.Ack()
	}

	raw = rawChannel(t)
	if _, err := raw.QueueDelete(topic+".relay-due-305ms", false, false, false); err != nil {
		t.Fatal(err)
	}
	lost := relay.NewMessage([]byte("2")).DeliverAfter(300 * time.Millisecond)
	if err := pub.Publish(ctx, topic, lost); !errors.Is(err, amqp.ErrUnroutable) {
		t.Fatalf("delayed publish with its due queue deleted: %v, want ErrUnroutable", err)
	}
	again := relay.NewMessage([]byte("3")).DeliverAfter(300 * time.Millisecond)
	if err := pub.Publish(ctx, topic, again); err != nil {
		t.Fatalf("the next delayed publish: %v, want the due queue declared again", err)
	}
	if got := relaytest.Next(t, ch, "the delayed message after the redeclare"); got.ID != again.ID {
		t.Fatalf("got %s %q, want %s", got.ID, got.Payload, again.ID)
	} else {
		_ = got.Ack()
	}
}
