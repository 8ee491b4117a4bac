package driver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// pollRecv fails its first call, then answers every call with nothing,
// as a long poll on an empty queue does once the broker is reachable.
type pollRecv struct {
	nopSettler
	calls atomic.Int64
}

func (r *pollRecv) Receive(ctx context.Context, _ int) ([]Received, error) {
	if r.calls.Add(1) == 1 {
		return nil, errors.New("broker unreachable")
	}
	select {
	case <-time.After(time.Millisecond):
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// An empty answer (no messages, no error) counts as a successful call:
// Health clears the earlier failure although there is nothing to deliver,
// and the window is not held by the empty calls.
func TestEmptyReceiveClearsHealth(t *testing.T) {
	r := &pollRecv{}
	s := NewSubscriber(recvSub{r}, Options{InFlight: 4})
	defer s.Close()
	if _, err := s.Subscribe(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.calls.Load() < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d Receive calls in 30s: empty answers are not followed by new calls", r.calls.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health after %d empty answers that followed one failure: %v", r.calls.Load()-1, err)
	}
}
