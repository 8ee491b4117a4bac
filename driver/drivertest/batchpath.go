package drivertest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// batchPath: where the subscriber has the shared layer's batch path
// (driver.BatchSubscriber), 120 messages of one Key arrive through
// SubscribeBatches in non-empty batches, each once with its payload, in
// publish order where the backend orders per key; acked, none comes back
// to the group, and the batch channel closes when the subscription ends.
func batchPath(t *testing.T, e *env) {
	sub := e.sub(t, e.h.NewGroup(t))
	bs, ok := sub.(driver.BatchSubscriber)
	if !ok {
		t.Skipf("SKIP: the subscriber (%T) has no batch path (driver.BatchSubscriber)", sub)
	}
	topic := e.h.NewTopic(t)
	provision(t, sub, topic)
	const n = 120
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("batch path %03d", i)))
		msgs[i].Key = "one-key"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := bs.SubscribeBatches(ctx, topic)
	if err != nil {
		t.Fatalf("SubscribeBatches(%q): %v", topic, err)
	}
	publish(t, e.pub(t), topic, msgs...)

	want := make(map[string][]byte, n)
	for _, m := range msgs {
		want[m.ID] = m.Payload
	}
	var order []string
	seen := map[string]int{}
	for len(seen) < n {
		select {
		case batch, open := <-ch:
			if !open {
				t.Fatalf("batch channel closed with %d of %d messages", len(seen), n)
			}
			if len(batch) == 0 {
				t.Fatal("empty batch")
			}
			for _, m := range batch {
				p, ok := want[m.ID]
				if !ok {
					t.Fatalf("unexpected message %s", m.ID)
				}
				if !bytes.Equal(m.Payload, p) {
					t.Fatalf("message %s: payload %q, want %q", m.ID, m.Payload, p)
				}
				if seen[m.ID] == 0 {
					order = append(order, m.ID)
				}
				seen[m.ID]++
				if err := m.Ack(); err != nil {
					t.Fatalf("Ack: %v", err)
				}
			}
		case <-time.After(e.h.ReceiveTimeout):
			t.Fatalf("%d of %d messages after waiting %v", len(seen), n, e.h.ReceiveTimeout)
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("message %s delivered %d times", id, c)
		}
	}
	if e.caps.Ordering != relay.OrderNone {
		for i, m := range msgs {
			if order[i] != m.ID {
				t.Fatalf("message %d arrived as %s, want %s (publish order, ordering %q)", i, order[i], m.ID, e.caps.Ordering)
			}
		}
	}
	cancel()
	deadline := time.After(e.h.ReceiveTimeout + 15*time.Second)
	for {
		select {
		case batch, open := <-ch:
			if !open {
				return
			}
			for _, m := range batch {
				t.Errorf("message %s delivered again after it was acked", m.ID)
			}
		case <-deadline:
			t.Fatal("batch channel still open after the subscription's ctx was cancelled")
		}
	}
}
