package driver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// The batch path delivers what each Receive returned as one slice, in
// order, within the same window as Subscribe, and its messages settle and
// release like any other.
func TestSubscribeBatchesDeliversReceivedBatches(t *testing.T) {
	r := newFakeRecv(10)
	s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: 4})
	var _ BatchSubscriber = s
	ch, err := s.SubscribeBatches(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	var got []*relay.Message
	for len(got) < 4 {
		b := nextBatch(t, ch)
		if len(b) == 0 {
			t.Fatal("empty batch")
		}
		got = append(got, b...)
	}
	if len(got) != 4 {
		t.Fatalf("got %d messages with a window of 4", len(got))
	}
	select {
	case b := <-ch:
		t.Fatalf("batch of %d (first %s) beyond the window of 4", len(b), b[0].ID)
	case <-time.After(100 * time.Millisecond):
	}
	for _, m := range got {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	for len(got) < 10 {
		b := nextBatch(t, ch)
		got = append(got, b...)
		for _, m := range b {
			_ = m.Ack()
		}
	}
	for i, m := range got {
		if want := string(rune('a' + i)); m.ID != want || m.Attempt() != 1 {
			t.Fatalf("message %d: ID %q attempt %d, want %q attempt 1", i, m.ID, m.Attempt(), want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Fatal("batch channel open after Close")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	acks := 0
	for _, st := range r.settled {
		if st.Ack {
			acks++
		}
	}
	if acks != 10 || len(r.released) != 0 {
		t.Fatalf("acks %d, released %v; want 10 acks, nothing released", acks, r.released)
	}
}

// A batch not yet settled when the subscription ends is released, and its
// messages then answer ErrSubscriptionEnded.
func TestSubscribeBatchesReleasesUnsettledAtEnd(t *testing.T) {
	r := newFakeRecv(3)
	s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: 8})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.SubscribeBatches(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var held []*relay.Message
	for len(held) < 3 {
		held = append(held, nextBatch(t, ch)...)
	}
	cancel()
	for range ch {
	}
	_ = s.Close()
	r.mu.Lock()
	released := len(r.released)
	r.mu.Unlock()
	if released != 3 {
		t.Fatalf("released %d, want 3", released)
	}
	if err := held[0].Ack(); !errors.Is(err, relay.ErrSubscriptionEnded) {
		t.Fatalf("Ack after the end = %v, want ErrSubscriptionEnded", err)
	}
}

func nextBatch(t *testing.T, ch <-chan []*relay.Message) []*relay.Message {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("no batch within 5s")
		return nil
	}
}
