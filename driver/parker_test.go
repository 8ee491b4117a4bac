package driver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// parkingRecv is a fakeRecv that records Park calls.
type parkingRecv struct {
	*fakeRecv
	pmu    sync.Mutex
	parked []any
}

func (r *parkingRecv) Park(h any) {
	r.pmu.Lock()
	r.parked = append(r.parked, h)
	r.pmu.Unlock()
}

// A receiver implementing Parker is told when the shared layer starts
// holding a message for an emulated NackAfter delay, and only then: a
// native delay, a Nack and an Ack are passed to Settle as before.
func TestParkOnEmulatedDelay(t *testing.T) {
	pr := &parkingRecv{fakeRecv: newFakeRecv(3)}
	s := NewSubscriber(&parkingSubscriber{pr: pr}, Options{InFlight: 4})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := <-ch, <-ch, <-ch
	if err := a.NackAfter(time.Hour); err != nil {
		t.Fatal(err)
	}
	_ = b.Nack()
	_ = c.Ack()
	pr.pmu.Lock()
	parked := append([]any(nil), pr.parked...)
	pr.pmu.Unlock()
	if len(parked) != 1 || parked[0] != 0 {
		t.Errorf("parked %v, want only the first message's handle 0", parked)
	}
	_ = s.Close()
}

// parkingSubscriber hands out a parkingRecv.
type parkingSubscriber struct{ pr *parkingRecv }

func (f *parkingSubscriber) Subscribe(context.Context, string) (Receiver, error) { return f.pr, nil }
func (f *parkingSubscriber) Capabilities() relay.Capabilities                    { return relay.Capabilities{} }
func (f *parkingSubscriber) Close() error                                        { return nil }
