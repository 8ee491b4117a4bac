package driver

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// TestDelayedNackHoldsNoSlot: a message waiting out a NackAfter, native or
// emulated, holds no window slot, and a second NackAfter with another
// delay changes nothing (rule 7 and rule 5 of the contract).
func TestDelayedNackHoldsNoSlot(t *testing.T) {
	for _, native := range []bool{false, true} {
		r := newFakeRecv(3)
		r.native = native
		s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: 2})
		ch, err := s.Subscribe(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		first, second := <-ch, <-ch
		if err := first.NackAfter(time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := first.NackAfter(time.Millisecond); err != nil {
			t.Fatalf("native=%v: second NackAfter = %v, want nil", native, err)
		}
		select {
		case third := <-ch: // the delayed message's slot went to it
			_ = third.Ack()
		case <-time.After(30 * time.Second):
			t.Fatalf("native=%v: window of 2 full with one message held and one delayed", native)
		}
		_ = second.Ack()
		_ = s.Close()
		r.mu.Lock()
		for _, st := range r.settled {
			if st.Handle == 0 { // the first message delivered, the delayed one
				if !native || st.Delay != time.Hour {
					t.Errorf("native=%v: delayed message settled as %+v, want only a native nack after 1h", native, st)
				}
			}
		}
		r.mu.Unlock()
	}
}

// TestSettleBatchWholeWindow: with SettleBatch set to the window and a
// linger that never runs out, acks of half the window are not sent; the
// ack of the last held message sends the whole window in one Settle, and
// the next Receive asks for the whole window.
func TestSettleBatchWholeWindow(t *testing.T) {
	const window = 8
	r := newFakeRecv(2 * window)
	s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: window, SettleBatch: window, SettleLinger: time.Hour})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	// Ack only once the whole window is held: an ack while nothing else
	// is held yet is sent at once, by design, which is not what this
	// test is about.
	waitHeld := func() {
		for deadline := time.Now().Add(10 * time.Second); len(ch) < window; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d messages delivered", len(ch), window)
			}
		}
	}
	waitHeld()
	for i := range window {
		if err := (<-ch).Ack(); err != nil {
			t.Fatal(err)
		}
		if i == window/2-1 {
			// Give a flush of half the window (the default) time to
			// happen, so that the check below would see it.
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitHeld() // the second window, claimed after the flush
	for range window {
		if err := (<-ch).Ack(); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) != 2 || r.calls[0] != window || r.calls[1] != window {
		t.Fatalf("Settle batches %v, want [%d %d]", r.calls, window, window)
	}
	if r.maxAsked != window {
		t.Fatalf("Receive asked for at most %d, want %d", r.maxAsked, window)
	}
}

// TestReceiveKeepsWholeWindows: with the whole window settled at once and
// a Receive that takes longer than SettleLinger (a PostgreSQL claim), the
// message that the first call probes the size with must not split every
// later window in two: after it, each Receive asks for the whole window.
// Before the receive loop waited for the probed message's settlement, the
// calls asked for 1, 7, 1, 7, ... (twice the broker calls).
func TestReceiveKeepsWholeWindows(t *testing.T) {
	const window, windows = 8, 6
	r := newFakeRecv(1 + window*windows)
	r.cost = 100 * time.Millisecond
	// A wait for a whole window long enough for the acks to beat it under
	// -race on a busy machine, and a linger shorter than a Receive.
	defer func(d time.Duration) { maxProbeWait = d }(maxProbeWait)
	maxProbeWait = 50 * time.Millisecond
	s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: window, SettleBatch: window, SettleLinger: 50 * time.Millisecond})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	for range 1 + window*windows {
		if err := (<-ch).Ack(); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	want := []int{1} // the probe of the message size
	for range windows {
		want = append(want, window)
	}
	if !slices.Equal(r.asked, want) {
		t.Fatalf("Receive asked for %v, want %v", r.asked, want)
	}
}

// windowRecv is a fakeRecv that limits the window (WindowLimiter).
type windowRecv struct {
	*fakeRecv
	limit int
}

func (r windowRecv) WindowLimit() int { return r.limit }

type windowSub struct {
	fakeSub
	r windowRecv
}

func (f *windowSub) Subscribe(context.Context, string) (Receiver, error) { return f.r, nil }

// TestWindowLimiter: a receiver's WindowLimit below InFlight is the
// subscription's window: with 3 of InFlight 8 held unsettled, Receive is
// not asked for more until one is settled, and never for more than 3.
func TestWindowLimiter(t *testing.T) {
	r := newFakeRecv(10)
	s := NewSubscriber(&windowSub{fakeSub{r: r}, windowRecv{r, 3}}, Options{InFlight: 8})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	held := []*relay.Message{<-ch, <-ch, <-ch}
	select {
	case m := <-ch:
		t.Fatalf("fourth message %s delivered with a window limited to 3", m.ID)
	case <-time.After(100 * time.Millisecond):
	}
	_ = held[0].Ack()
	<-ch // the freed slot is used
	_ = s.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxAsked > 3 {
		t.Errorf("Receive asked for %d, the window is limited to 3", r.maxAsked)
	}
}
