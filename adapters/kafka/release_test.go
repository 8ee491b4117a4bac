package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// endRules runs check twice: with the subscription the member's only
// topic (its end leaves the group) and with a sibling topic subscribed on
// the same subscriber (its end purges the topic from the member).
func endRules(t *testing.T, check func(t *testing.T, c *cluster, sub relay.Subscriber, group string)) {
	for _, sibling := range []bool{false, true} {
		name := "last-topic"
		if sibling {
			name = "with-sibling"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t)
			group := unique("g")
			sub := relaytest.OpenSubscriber(t, c.subURL(group))
			if sibling {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if _, err := sub.Subscribe(ctx, unique("sibling")); err != nil {
					t.Fatal(err)
				}
			}
			check(t, c, sub, group)
		})
	}
}

// TestClosedChannelRule (project rule 8): once a subscription's channel
// is closed, the acks made before have been committed, as far as the
// contiguous acked prefix goes; the unsettled record is released, and the
// acked records after it in its partition are delivered to the group
// again (Kafka keeps a position, not per-message acks).
func TestClosedChannelRule(t *testing.T) {
	endRules(t, func(t *testing.T, c *cluster, sub relay.Subscriber, group string) {
		topic := unique("rule8")
		c.createTopic(t, topic, 1)
		msgs := publishN(t, relaytest.OpenPublisher(t, c.url()), topic, 10, nil)
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for i := range msgs {
			m := recv(t, ch)
			if m.ID != msgs[i].ID {
				t.Fatalf("got %s at %d, want %s", m.ID, i, msgs[i].ID)
			}
			if i != 3 {
				if err := m.Ack(); err != nil {
					t.Fatal(err)
				}
			}
		}
		cancel()
		for range ch {
		}
		// No waiting: the closed channel is the promise.
		if off := c.committed(t, group, topic); off[0] != 3 {
			t.Fatalf("committed %v when the channel closed, want partition 0 at 3", off)
		}
		ch2, err := sub.Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		for i := 3; i < len(msgs); i++ {
			m := recv(t, ch2)
			if m.ID != msgs[i].ID {
				t.Fatalf("redelivery: got %s (%s), want %s (%d)", m.ID, m.Payload, msgs[i].ID, i)
			}
			_ = m.Ack()
		}
		quiet(t, ch2, 300*time.Millisecond)
	})
}

// TestNackAfterAcrossEnd (project rule 6): Kafka's NackAfter is emulated
// (NativeDelay false), so a message waiting out its delay when its
// subscription ends is released to the group at once: the next
// subscription gets it long before the delay.
func TestNackAfterAcrossEnd(t *testing.T) {
	endRules(t, func(t *testing.T, c *cluster, sub relay.Subscriber, group string) {
		if sub.(relay.CapabilityReporter).Capabilities().NativeDelay {
			t.Fatal("kafka declares a native delay")
		}
		topic := unique("nackafter")
		c.createTopic(t, topic, 1)
		msgs := publishN(t, relaytest.OpenPublisher(t, c.url()), topic, 1, nil)
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		m := recv(t, ch)
		if err := m.NackAfter(time.Hour); err != nil {
			t.Fatal(err)
		}
		cancel()
		for range ch {
		}
		if off := c.committed(t, group, topic); off[0] > 0 {
			t.Fatalf("committed %v past the delayed record", off)
		}
		ch2, err := sub.Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		again := recv(t, ch2) // within 30s, not an hour
		if again.ID != msgs[0].ID || again.Attempt() != 2 {
			t.Fatalf("got %s attempt %d, want %s attempt 2", again.ID, again.Attempt(), msgs[0].ID)
		}
		_ = again.Ack()
	})
}
