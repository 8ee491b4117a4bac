package driver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// hungRecv delivers from a fakeRecv but, once hung, blocks every Settle,
// Release and Close until its ctx is done, as against a broker that stopped
// answering; it records which calls gave up.
type hungRecv struct {
	*fakeRecv
	mu     sync.Mutex
	hung   bool
	gaveUp []string
}

func (h *hungRecv) block(ctx context.Context, what string) error {
	h.mu.Lock()
	hung := h.hung
	h.mu.Unlock()
	if !hung {
		return nil
	}
	<-ctx.Done()
	h.mu.Lock()
	h.gaveUp = append(h.gaveUp, what)
	h.mu.Unlock()
	return ctx.Err()
}

func (h *hungRecv) Settle(ctx context.Context, b []Settle) error {
	if err := h.block(ctx, "settle"); err != nil {
		return err
	}
	return h.fakeRecv.Settle(ctx, b)
}

func (h *hungRecv) Release(ctx context.Context, hs []any) error {
	if err := h.block(ctx, "release"); err != nil {
		return err
	}
	return h.fakeRecv.Release(ctx, hs)
}

func (h *hungRecv) Close(ctx context.Context) error {
	if err := h.block(ctx, "close"); err != nil {
		return err
	}
	return h.fakeRecv.Close(ctx)
}

type hungSub struct{ r *hungRecv }

func (f *hungSub) Subscribe(context.Context, string) (Receiver, error) { return f.r, nil }
func (f *hungSub) Capabilities() relay.Capabilities                    { return relay.Capabilities{} }
func (f *hungSub) Close() error                                        { return nil }

// TestCloseTimeoutBoundsTeardown: against a hung broker, the final
// settlements (with their retries), the release and the receiver's Close
// share one CloseTimeout deadline, whatever BrokerTimeout says, and each
// of them was given up on, not skipped.
func TestCloseTimeoutBoundsTeardown(t *testing.T) {
	r := &hungRecv{fakeRecv: newFakeRecv(2)}
	s := NewSubscriber(&hungSub{r: r}, Options{InFlight: 4, BrokerTimeout: time.Hour, CloseTimeout: 200 * time.Millisecond, SettleLinger: time.Hour})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	acked, held := <-ch, <-ch
	r.mu.Lock()
	r.hung = true
	r.mu.Unlock()
	if err := acked.Ack(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	// The bound under test is 200ms; a minute only catches a hang (before
	// the deadline, this took 3 settle tries of BrokerTimeout each, a
	// release of BrokerTimeout and a Close without any bound).
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Subscriber.Close did not return against a hung broker")
	}
	if err := held.Ack(); !errors.Is(err, relay.ErrSubscriptionEnded) {
		t.Errorf("Ack after Close = %v, want ErrSubscriptionEnded", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	want := []string{"settle", "release", "close"}
	if len(r.gaveUp) != len(want) {
		t.Fatalf("calls given up on: %v, want %v", r.gaveUp, want)
	}
	for i := range want {
		if r.gaveUp[i] != want[i] {
			t.Fatalf("calls given up on: %v, want %v", r.gaveUp, want)
		}
	}
}
