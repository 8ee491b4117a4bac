package driver

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// With InFlightBytes the window holds no more unsettled bytes than the
// bound (here 3 messages of 300 bytes under a 1000-byte bound, although
// InFlight allows 100), and acking one lets exactly one more in.
func TestInFlightBytesBoundsWindow(t *testing.T) {
	r := newFakeRecv(20)
	r.payload = 299 // + a 1-byte ID = 300 bytes a message
	s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: 100, InFlightBytes: 1000})
	defer s.Close()
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	var held []*relay.Message
	for range 3 {
		held = append(held, <-ch)
	}
	if m := waitOne(ch, 200*time.Millisecond); m != nil {
		t.Fatalf("a 4th message (%s) was delivered with 900 of 1000 bytes held", m.ID)
	}
	if err := held[0].Ack(); err != nil {
		t.Fatal(err)
	}
	if m := waitOne(ch, 5*time.Second); m == nil {
		t.Fatal("no message after an ack freed 300 bytes")
	}
	if m := waitOne(ch, 200*time.Millisecond); m != nil {
		t.Fatalf("a 2nd message (%s) after one ack freed room for one", m.ID)
	}
	r.mu.Lock()
	asked := r.maxAsked
	r.mu.Unlock()
	if asked > 3 {
		t.Errorf("Receive was asked for up to %d messages; at most 3 of the recent size fit", asked)
	}
}

// A message larger than the whole byte bound is still delivered, one at a
// time.
func TestInFlightBytesLetsOneLargeMessageThrough(t *testing.T) {
	r := newFakeRecv(3)
	r.payload = 5000
	s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: 10, InFlightBytes: 1000})
	defer s.Close()
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		m := waitOne(ch, 5*time.Second)
		if m == nil {
			t.Fatalf("message %d of 5000 bytes not delivered under a 1000-byte bound", i+1)
		}
		if m2 := waitOne(ch, 100*time.Millisecond); m2 != nil {
			t.Fatalf("two messages over the byte bound held at once")
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitOne returns the next message of ch, or nil after d.
func waitOne(ch <-chan *relay.Message, d time.Duration) *relay.Message {
	select {
	case m := <-ch:
		return m
	case <-time.After(d):
		return nil
	}
}

// One Receive asks for at most a quarter of the byte bound (by the recent
// size), so that a client library decoding the reply never buffers much
// of the window at once; the window itself still fills up.
func TestReceiveCallTakesAQuarterOfTheByteBound(t *testing.T) {
	r := newFakeRecv(200)
	r.payload = 98 // + an ID of 1 or 2 bytes: about 100 bytes a message
	s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: 100, InFlightBytes: 10000})
	defer s.Close()
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		m := waitOne(ch, 5*time.Second)
		if m == nil {
			t.Fatalf("message %d of 200 not delivered", i+1)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	asked := r.maxAsked
	r.mu.Unlock()
	if asked > 25 || asked < 10 {
		t.Errorf("Receive was asked for up to %d messages; want 10 to 25 (a quarter of 10000 bytes is 25 of about 100)", asked)
	}
}

// Empty answers (a long poll that timed out) say nothing about message
// sizes: after many of them Receive is still asked for no more than the
// byte bound allows by the size seen before.
func TestEmptyReceivesKeepTheSizeGuess(t *testing.T) {
	r := newFakeRecv(1)
	r.payload = 98 // about 100 bytes a message
	s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: 100, InFlightBytes: 10000})
	defer s.Close()
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	first := waitOne(ch, 5*time.Second)
	if first == nil {
		t.Fatal("the first message was not delivered")
	}
	r.mu.Lock()
	r.empties = 200
	for i := 1; i < 200; i++ {
		r.queue = append(r.queue, i)
	}
	r.maxAsked = 0
	r.mu.Unlock()
	signal(r.wake)
	if err := first.Ack(); err != nil {
		t.Fatal(err)
	}
	for i := range 199 {
		m := waitOne(ch, 5*time.Second)
		if m == nil {
			t.Fatalf("message %d of 199 not delivered", i+1)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	asked, left := r.maxAsked, r.empties
	r.mu.Unlock()
	if left != 0 || asked > 25 {
		t.Errorf("after %d empty answers Receive was asked for up to %d messages; want at most 25 (a quarter of 10000 bytes)", 200-left, asked)
	}
}
