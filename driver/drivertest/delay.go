package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// earlyTolerance is how much earlier than its DeliverAt a message may be
// received: clock reads of the test and of the broker (one machine) that
// round to the millisecond.
const earlyTolerance = 2 * time.Millisecond

// delayedDelivery checks Message.DeliverAt as the backend declares it:
// nothing is delivered before its time, everything after it, due order is
// kept where the backend orders, and a backend without delayed delivery
// refuses the Publish, sending nothing.
func delayedDelivery(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)

	if e.caps.DelayedDelivery == relay.DelayNone {
		m := relay.NewMessage([]byte("later")).DeliverAfter(time.Second)
		err := pub.Publish(context.Background(), topic, m)
		if !errors.Is(err, relay.ErrDelayUnsupported) || !errors.Is(err, relay.ErrNotSupported) {
			t.Fatalf("Publish with DeliverAt on a backend without delayed delivery: %v, want ErrDelayUnsupported", err)
		}
		if got := none(ch, 1500*time.Millisecond); got != nil {
			t.Fatalf("a refused delayed message was delivered (ID %s)", got.ID)
		}
		t.Logf("refused: %v", err)
		return
	}

	start := time.Now()
	key := "one-key" // one key, so that per-key backends order them too
	delays := []time.Duration{1500 * time.Millisecond, 500 * time.Millisecond, 2000 * time.Millisecond, 1000 * time.Millisecond}
	var msgs []*relay.Message
	for i, d := range delays {
		m := &relay.Message{ID: relay.NewID(), Key: key, Payload: fmt.Appendf(nil, "due %d after %v", i, d),
			Metadata: relay.Metadata{"due": d.String()}, DeliverAt: start.Add(d)}
		msgs = append(msgs, m)
	}
	now := &relay.Message{ID: relay.NewID(), Key: key, Payload: []byte("now")}
	past := &relay.Message{ID: relay.NewID(), Key: key, Payload: []byte("past"), DeliverAt: start.Add(-time.Hour)}
	// Delayed and immediate messages in one call, then each delayed one
	// alone: both paths of a publisher must honour DeliverAt.
	publish(t, pub, topic, msgs[0], now, msgs[1], past)
	publish(t, pub, topic, msgs[2])
	publish(t, pub, topic, msgs[3])

	byID := map[string]*relay.Message{}
	for _, m := range append([]*relay.Message{now, past}, msgs...) {
		byID[m.ID] = m
	}
	var order []string
	var latest time.Duration
	for len(order) < len(byID) {
		got := e.next(t, ch, fmt.Sprintf("message %d of %d", len(order)+1, len(byID)))
		at := time.Now()
		want, ok := byID[got.ID]
		if !ok {
			t.Fatalf("unexpected message %s (%q)", got.ID, got.Payload)
		}
		if !samePayload(got.Payload, want.Payload) || !sameMetadata(got.Metadata, want.Metadata) || got.Key != want.Key {
			t.Errorf("message %s arrived changed: key %q payload %q metadata %v", got.ID, got.Key, got.Payload, got.Metadata)
		}
		if !got.DeliverAt.IsZero() {
			t.Errorf("delivered message %s has DeliverAt %v, want zero", got.ID, got.DeliverAt)
		}
		if want.DeliverAt.After(start) {
			if early := want.DeliverAt.Sub(at); early > earlyTolerance {
				t.Errorf("message %s due at +%v delivered %v early", got.ID, want.DeliverAt.Sub(start), early)
			}
			latest = max(latest, at.Sub(want.DeliverAt))
		}
		if err := got.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
		order = append(order, got.ID)
	}
	// The immediate ones come first (their order between them aside), then
	// the delayed ones by due time where the backend keeps an order.
	first := map[string]bool{order[0]: true, order[1]: true}
	if !first[now.ID] || !first[past.ID] {
		t.Errorf("the messages without a delay were not delivered first: order %v", order)
	}
	if e.caps.Ordering != relay.OrderNone {
		wantOrder := []string{msgs[1].ID, msgs[3].ID, msgs[0].ID, msgs[2].ID}
		for i, id := range wantOrder {
			if order[2+i] != id {
				t.Errorf("delayed messages out of due order: got %v, want %v", order[2:], wantOrder)
				break
			}
		}
	}
	if extra := none(ch, 500*time.Millisecond); extra != nil {
		t.Errorf("acked delayed message delivered again (ID %s)", extra.ID)
	}

	if max := e.caps.MaxDeliverDelay; max > 0 {
		m := relay.NewMessage([]byte("too late")).DeliverAfter(max + time.Minute)
		err := pub.Publish(context.Background(), topic, m)
		var le *relay.LimitError
		if !errors.As(err, &le) || !errors.Is(err, relay.ErrLimit) || le.MessageID != m.ID {
			t.Errorf("Publish beyond MaxDeliverDelay %v: %v, want a *relay.LimitError for %s", max, err, m.ID)
		}
	}
	t.Logf("%s delayed delivery: 4 delayed + 2 immediate messages in order, none early, at most %v late",
		e.caps.DelayedDelivery, latest.Round(time.Millisecond))
}

// delayedAcrossRestart checks that a delayed message falls due while no
// subscription of its group runs, and is delivered to the next one.
func delayedAcrossRestart(t *testing.T, e *env) {
	if e.caps.DelayedDelivery == relay.DelayNone {
		t.Skip("the backend has no delayed delivery (checked by DelayedDelivery)")
	}
	if !e.caps.Durable {
		t.Skip("the backend is not durable: nothing outlives its subscribers")
	}
	topic, group := e.h.NewTopic(t), e.h.NewGroup(t)
	pub := e.pub(t)
	s1 := e.h.NewSubscriber(t, group)
	provision(t, s1, topic)
	_, cancel := subscribe(t, s1, topic)
	cancel()
	if err := s1.Close(); err != nil {
		t.Fatalf("closing the first subscriber: %v", err)
	}

	m := &relay.Message{ID: relay.NewID(), Payload: []byte("due while nobody listens")}
	m.DeliverAfter(time.Second)
	publish(t, pub, topic, m)
	time.Sleep(time.Until(m.DeliverAt) + 500*time.Millisecond)

	s2 := e.sub(t, group)
	ch, _ := subscribe(t, s2, topic)
	got := e.next(t, ch, "the delayed message, to a subscriber started after it fell due")
	if got.ID != m.ID || !samePayload(got.Payload, m.Payload) {
		t.Fatalf("got %s %q, want %s %q", got.ID, got.Payload, m.ID, m.Payload)
	}
	if err := got.Ack(); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if extra := none(ch, 500*time.Millisecond); extra != nil {
		t.Errorf("delivered again (ID %s)", extra.ID)
	}
}

// BenchmarkDelayLateness measures how late delayed messages become visible:
// it publishes b.N messages, each with a DeliverAt spread over the next
// second (run it with -benchtime=Nx), and reports the lateness of their delivery past DeliverAt as
// p50-late-ms, p99-late-ms and max-late-ms. Call it from an adapter's
// benchmark with the adapter's harness; it fails the benchmark when the
// backend has no delayed delivery or a message is delivered early.
func BenchmarkDelayLateness(b *testing.B, h Harness) {
	if h.NewTopic == nil {
		h.NewTopic = func(testing.TB) string { return "relay-bench-" + shortID() }
	}
	if h.NewGroup == nil {
		h.NewGroup = func(testing.TB) string { return "g-" + shortID() }
	}
	pub := h.NewPublisher(b)
	defer pub.Close()
	if cr, ok := pub.(relay.CapabilityReporter); ok && cr.Capabilities().DelayedDelivery == relay.DelayNone {
		b.Fatalf("backend %q has no delayed delivery", cr.Capabilities().Backend)
	}
	topic := h.NewTopic(b)
	sub := h.NewSubscriber(b, h.NewGroup(b))
	defer sub.Close()
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(context.Background(), topic); err != nil {
			b.Fatalf("Provision: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		b.Fatalf("Subscribe: %v", err)
	}
	b.ResetTimer()
	start := time.Now()
	due := map[string]time.Time{}
	for i := 0; i < b.N; i++ {
		m := relay.NewMessage([]byte("tick"))
		m.DeliverAt = start.Add(200*time.Millisecond + time.Duration(i)*time.Second/time.Duration(b.N))
		due[m.ID] = m.DeliverAt
		if err := pub.Publish(ctx, topic, m); err != nil {
			b.Fatalf("Publish: %v", err)
		}
	}
	late := make([]time.Duration, 0, b.N)
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for len(late) < b.N {
		select {
		case m, ok := <-ch:
			if !ok {
				b.Fatalf("subscription ended after %d of %d", len(late), b.N)
			}
			at := time.Now()
			d, known := due[m.ID]
			if !known {
				continue
			}
			delete(due, m.ID)
			if d.Sub(at) > earlyTolerance {
				b.Fatalf("message delivered %v early", d.Sub(at))
			}
			late = append(late, max(0, at.Sub(d)))
			_ = m.Ack()
		case <-timeout.C:
			b.Fatalf("%d of %d delayed messages delivered within a minute", len(late), b.N)
		}
	}
	b.StopTimer()
	slices.Sort(late)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(late[len(late)/2]), "p50-late-ms")
	b.ReportMetric(ms(late[len(late)*99/100]), "p99-late-ms")
	b.ReportMetric(ms(late[len(late)-1]), "max-late-ms")
}
