package amqp_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/internal/testkit/relaytest"
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

// TestDueOrderWithinBucket pins down how delayed delivery orders messages.
// A due queue holds the delays of one bucket (b/2^(1/4) < delay ≤ b) and
// RabbitMQ expires a message only at the head of its queue, so within a
// bucket messages fall due in the order they entered the queue. The
// publisher sends the delayed messages of one Publish call in due order,
// so they come in due order; of separate calls, a message due earlier than
// one published before it in its bucket comes right after that one, late
// by the difference of their delays (under 19% of its own delay). Across
// buckets the order is the due order.
func TestDueOrderWithinBucket(t *testing.T) {
	// Bucket 1024 ms holds delays of 862..1024 ms, bucket 725 ms 610..724.
	delays := []int{1000, 950, 900, 870, 700}
	for _, c := range []struct {
		name  string
		calls bool // one Publish call per message, else one for all
		want  []int
	}{
		{"one call", false, []int{700, 870, 900, 950, 1000}},
		{"separate calls", true, []int{700, 1000, 950, 900, 870}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cl := newCleaner(t)
			topic := unique("dueorder")
			sub := openSub(t, cl, unique("g"))
			relaytest.Provision(t, sub, topic)
			ch, _ := relaytest.Subscribe(t, sub, topic)
			pub := openPub(t)

			start := time.Now()
			var msgs []*relay.Message
			due := map[string]time.Time{}
			name := map[string]int{}
			for _, d := range delays {
				m := relay.NewMessage(nil)
				if c.calls {
					start = time.Now() // the delay as meant, whatever the calls before took
				}
				m.DeliverAt = start.Add(time.Duration(d) * time.Millisecond)
				msgs = append(msgs, m)
				due[m.ID], name[m.ID] = m.DeliverAt, d
				if c.calls {
					if err := pub.Publish(ctx, topic, m); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !c.calls {
				if err := pub.Publish(ctx, topic, msgs...); err != nil {
					t.Fatal(err)
				}
			}
			var got []int
			for range msgs {
				m := relaytest.Next(t, ch, "a delayed message")
				at := time.Now()
				_ = m.Ack()
				got = append(got, name[m.ID])
				if early := due[m.ID].Sub(at); early > 2*time.Millisecond {
					t.Errorf("message due at +%dms delivered %v early", name[m.ID], early)
				}
				// Late by at most the wait behind the 1000 ms message of
				// its bucket, plus scheduling.
				if late := at.Sub(due[m.ID]); late > time.Duration(1000-name[m.ID])*time.Millisecond+500*time.Millisecond {
					t.Errorf("message due at +%dms delivered %v late", name[m.ID], late)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("delivered in the order of delays %v (ms), want %v", got, c.want)
			}
		})
	}
}
