package driver

import (
	"context"
	"testing"
	"time"
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
