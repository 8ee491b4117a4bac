package driver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// duePub is a fakePub that opts in to holding until due.
type duePub struct {
	fakePub
	sent []*relay.Message
}

func (d *duePub) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	d.mu.Lock()
	d.sent = append(d.sent, msgs...)
	d.mu.Unlock()
	return d.fakePub.SendBatch(ctx, topic, msgs)
}
func (d *duePub) Capabilities() relay.Capabilities {
	return relay.Capabilities{DelayedDelivery: relay.DelayEmulated}
}
func (d *duePub) HoldsUntilDue() bool { return true }

// TestStampDue: a DueHolder's publisher sends a delayed message as a copy
// carrying DeliverAtHeader, leaves the caller's message as it was, strips
// the reserved header from messages without a delay, and sends messages
// without either untouched (the same pointers).
func TestStampDue(t *testing.T) {
	d := &duePub{}
	p := NewPublisher(d, 0)
	defer p.Close()
	due := time.Now().Add(time.Hour)
	delayed := &relay.Message{ID: "delayed", Payload: []byte("d"), DeliverAt: due}
	plain := &relay.Message{ID: "plain", Payload: []byte("p")}
	forged := &relay.Message{ID: "forged", Metadata: relay.Metadata{DeliverAtHeader: "2999-01-01T00:00:00Z", "k": "v"}}
	past := &relay.Message{ID: "past", DeliverAt: time.Now().Add(-time.Minute)}
	if err := p.Publish(context.Background(), "t", delayed, plain, forged, past); err != nil {
		t.Fatal(err)
	}
	if len(d.sent) != 4 {
		t.Fatalf("sent %d messages, want 4", len(d.sent))
	}
	if got := d.sent[0].Metadata[DeliverAtHeader]; got != due.UTC().Format(time.RFC3339Nano) || d.sent[0].ID != "delayed" || string(d.sent[0].Payload) != "d" {
		t.Errorf("delayed message sent as %+v, want header %s", d.sent[0], due.UTC().Format(time.RFC3339Nano))
	}
	if delayed.Metadata != nil || !delayed.DeliverAt.Equal(due) {
		t.Errorf("the caller's message changed: %+v", delayed)
	}
	if d.sent[1] != plain || d.sent[3] != past {
		t.Error("messages without a delay or the header were copied")
	}
	if _, ok := d.sent[2].Metadata[DeliverAtHeader]; ok || d.sent[2].Metadata["k"] != "v" {
		t.Errorf("a caller's own %s header was sent: %v", DeliverAtHeader, d.sent[2].Metadata)
	}
	if _, ok := forged.Metadata[DeliverAtHeader]; !ok {
		t.Error("the caller's message lost its metadata")
	}

	// PublishAsync stamps the same way.
	async := &relay.Message{ID: "async", DeliverAt: due}
	done := make(chan error, 1)
	if err := p.PublishAsync(context.Background(), "t", []*relay.Message{async}, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	last := d.sent[len(d.sent)-1]
	d.mu.Unlock()
	if last.ID != "async" || last.Metadata[DeliverAtHeader] != due.UTC().Format(time.RFC3339Nano) {
		t.Errorf("PublishAsync sent %+v, want the header", last)
	}

}

// dueRecv is a broker in miniature: a nack with a delay redelivers the
// message after it, counting deliveries in Attempt.
type dueRecv struct {
	mu       sync.Mutex
	ready    []Received
	wake     chan struct{}
	attempts map[string]int
	delays   []time.Duration // of every delayed nack
}

func (r *dueRecv) put(m *relay.Message) {
	r.mu.Lock()
	r.attempts[m.ID]++
	md := m.Metadata.Clone() // a fresh copy per delivery, as a broker decodes one
	r.ready = append(r.ready, Received{Msg: &relay.Message{ID: m.ID, Metadata: md, Payload: m.Payload}, Attempt: r.attempts[m.ID], Handle: m})
	r.mu.Unlock()
	signal(r.wake)
}

func (r *dueRecv) Receive(ctx context.Context, max int) ([]Received, error) {
	for {
		r.mu.Lock()
		if len(r.ready) > 0 {
			n := min(max, len(r.ready))
			out := append([]Received(nil), r.ready[:n]...)
			r.ready = r.ready[n:]
			r.mu.Unlock()
			return out, nil
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.wake:
		}
	}
}

func (r *dueRecv) Settle(_ context.Context, b []Settle) error {
	for _, s := range b {
		if s.Ack {
			continue
		}
		m := s.Handle.(*relay.Message)
		r.mu.Lock()
		r.delays = append(r.delays, s.Delay)
		r.mu.Unlock()
		time.AfterFunc(s.Delay, func() { r.put(m) })
	}
	return nil
}
func (r *dueRecv) Release(context.Context, []any) error { return nil }
func (r *dueRecv) Close(context.Context) error          { return nil }

type dueSub struct {
	r        *dueRecv
	holds    bool
	maxDelay time.Duration
}

func (d *dueSub) Subscribe(context.Context, string) (Receiver, error) { return d.r, nil }
func (d *dueSub) Capabilities() relay.Capabilities {
	return relay.Capabilities{NativeDelay: true, MaxDelay: d.maxDelay}
}
func (d *dueSub) Close() error        { return nil }
func (d *dueSub) HoldsUntilDue() bool { return d.holds }

func newDueRecv() *dueRecv {
	return &dueRecv{wake: make(chan struct{}, 1), attempts: map[string]int{}}
}

// TestHoldUntilDue: a subscription of a DueHolder nacks a message whose
// header is in the future with the time remaining (capped at MaxDelay,
// and held again when it comes back early), delivers it once due
// without the header and with Attempt counting only its deliveries to the
// consumer; a message without the header passes at once, even with a
// window of one while the other is held.
func TestHoldUntilDue(t *testing.T) {
	for _, maxDelay := range []time.Duration{0, 100 * time.Millisecond} {
		r := newDueRecv()
		s := NewSubscriber(&dueSub{r: r, holds: true, maxDelay: maxDelay}, Options{InFlight: 1})
		ch, err := s.Subscribe(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		due := time.Now().Add(350 * time.Millisecond)
		r.put(&relay.Message{ID: "later", Metadata: relay.Metadata{DeliverAtHeader: due.UTC().Format(time.RFC3339Nano), "k": "v"}})
		r.put(&relay.Message{ID: "now"})
		first := <-ch
		if first.ID != "now" || first.Attempt() != 1 {
			t.Fatalf("maxDelay %v: first delivered %s attempt %d, want now attempt 1", maxDelay, first.ID, first.Attempt())
		}
		_ = first.Ack()
		later := <-ch
		at := time.Now()
		if later.ID != "later" || at.Before(due) {
			t.Fatalf("maxDelay %v: %s delivered %v before due", maxDelay, later.ID, due.Sub(at))
		}
		if _, ok := later.Metadata[DeliverAtHeader]; ok || later.Metadata["k"] != "v" || later.Attempt() != 1 {
			t.Errorf("maxDelay %v: delivered with metadata %v attempt %d, want the header gone and attempt 1", maxDelay, later.Metadata, later.Attempt())
		}
		_ = later.Nack()
		again := <-ch
		if again.ID != "later" || again.Attempt() != 2 {
			t.Errorf("maxDelay %v: after a Nack got %s attempt %d, want later attempt 2", maxDelay, again.ID, again.Attempt())
		}
		_ = again.Ack()
		_ = s.Close()
		r.mu.Lock()
		for _, d := range r.delays {
			if maxDelay > 0 && d > maxDelay {
				t.Errorf("held for %v, beyond MaxDelay %v", d, maxDelay)
			}
		}
		if maxDelay > 0 && len(r.delays) < 3 {
			t.Errorf("held %d times (%v) with MaxDelay %v, want at least 3", len(r.delays), r.delays, maxDelay)
		}
		r.mu.Unlock()
	}
}

// TestNoHoldWithoutDueHolder: other drivers deliver a message carrying
// the header at once and as it is.
func TestNoHoldWithoutDueHolder(t *testing.T) {
	r := newDueRecv()
	s := NewSubscriber(&dueSub{r: r}, Options{})
	defer s.Close()
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	v := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	r.put(&relay.Message{ID: "x", Metadata: relay.Metadata{DeliverAtHeader: v}})
	m := <-ch
	if m.Metadata[DeliverAtHeader] != v {
		t.Errorf("metadata %v, want the header kept", m.Metadata)
	}
	_ = m.Ack()
}
