package driver

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// followRecv is a fakeRecv that records the windows WindowGrew reports.
type followRecv struct {
	*fakeRecv
	wmu   sync.Mutex
	grown []int
}

func (f *followRecv) WindowGrew(_ context.Context, window int) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.grown = append(f.grown, window)
	return nil
}

func (f *followRecv) windows() []int {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	return slices.Clone(f.grown)
}

type followSub struct{ r *followRecv }

func (f followSub) Subscribe(context.Context, string) (Receiver, error) { return f.r, nil }
func (followSub) Capabilities() relay.Capabilities                      { return relay.Capabilities{} }
func (followSub) Close() error                                          { return nil }

// consumeAll receives n messages of s's subscription to "t" and acks
// each; with holdOne, a message is acked only once the next one arrived,
// so the handler always holds one (a consumer that is never waiting), and
// before the last ack, which leaves the handler idle, atEnd is called
// (when not nil).
func consumeAll(t *testing.T, s *Subscriber, n int, holdOne bool, atEnd ...func()) {
	t.Helper()
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	var prev *relay.Message
	for range n {
		m := <-ch
		if m == nil {
			t.Fatal("channel closed early")
		}
		if holdOne {
			if prev != nil {
				if err := prev.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			prev = m
			continue
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range atEnd {
		f()
	}
	if prev != nil {
		_ = prev.Ack()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAdaptiveWindowGrowsWhileHandlerWaits: with a backlog and a handler
// that acks at once, an adaptive window doubles up to MaxInFlight (the
// receiver is told each step) and no Receive asks for more than it.
func TestAdaptiveWindowGrowsWhileHandlerWaits(t *testing.T) {
	const n = 20000
	r := &followRecv{fakeRecv: newFakeRecv(n)}
	s := NewSubscriber(followSub{r}, Options{InFlight: 8, MaxInFlight: 64})
	consumeAll(t, s, n, false)
	if got, want := r.windows(), []int{16, 32, 64}; !slices.Equal(got, want) {
		t.Errorf("window grew to %v, want %v", got, want)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxAsked != 64 {
		t.Errorf("largest Receive asked for %d, want 64 (MaxInFlight)", r.maxAsked)
	}
	if len(r.settled) != n {
		t.Errorf("%d settled, want %d", len(r.settled), n)
	}
}

// TestAdaptiveWholeWindowGrowsWhole: a driver that settles the whole
// window at once (SettleBatch = InFlight) has its window grow without
// splitting: the slots it grew by while a batch was out are received
// with the rest of the window once that batch is settled, not apart
// (each Receive asks for more than the one before until the window is
// grown), and none asks for less than half of it after.
func TestAdaptiveWholeWindowGrowsWhole(t *testing.T) {
	longFillWait(t)
	const n = 20000
	r := &followRecv{fakeRecv: newFakeRecv(n)}
	r.cost = 200 * time.Microsecond // a Receive takes a moment, as a broker's does
	s := NewSubscriber(followSub{r}, Options{InFlight: 8, MaxInFlight: 64, SettleBatch: 8})
	consumeAll(t, s, n, false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.settled) != n {
		t.Fatalf("%d settled, want %d", len(r.settled), n)
	}
	full := slices.Index(r.asked, 64)
	if full < 0 {
		t.Fatalf("no Receive asked for the grown window of 64: %v", r.asked)
	}
	for i := 1; i <= full; i++ {
		if r.asked[i] <= r.asked[i-1] {
			t.Fatalf("while the window grew, Receive asked for %v: the grown slots were received apart", r.asked[:full+1])
		}
	}
	for i, a := range r.asked[full:] {
		if a < 32 {
			t.Fatalf("Receive %d, after the window grew to 64, asked for %d (asked %v)", full+i, a, r.asked[max(0, full+i-8):min(len(r.asked), full+i+8)])
		}
	}
}

// longFillWait makes the receive loop wait as long as it takes for half a
// whole-settled window (see partialLocked), so that a test of that wait
// does not depend on the handler's speed on a loaded machine.
func longFillWait(t *testing.T) {
	old := maxFillWait
	maxFillWait = time.Minute
	t.Cleanup(func() { maxFillWait = old })
}

// TestWholeWindowNotReceivedInParts: with a handler slower per window
// than SettleLinger (but not per half window than maxFillWait), the flusher sends part of a whole-settled window
// after its linger; the receive loop waits for half the window to be
// free instead of asking for each part as it comes back.
func TestWholeWindowNotReceivedInParts(t *testing.T) {
	longFillWait(t)
	const n, window = 1000, 64
	r := &followRecv{fakeRecv: newFakeRecv(n)}
	s := NewSubscriber(followSub{r}, Options{InFlight: window, SettleBatch: window})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		m := <-ch
		// Busy for 40µs (a sleep would take a millisecond or more): a
		// window takes 2.5 ms, SettleLinger 1 ms, and half a window less
		// than maxFillWait.
		for start := time.Now(); time.Since(start) < 40*time.Microsecond; {
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, a := range r.asked[1:] { // the first asks for one message, to learn the size
		if a < window/2 {
			t.Fatalf("Receive %d asked for %d of a window of %d (asked %v)", i+1, a, window, r.asked)
		}
	}
}

// TestAdaptiveWindowStaysForBusyHandler: a handler that always holds a
// message (it never waits for the window) keeps the starting window.
func TestAdaptiveWindowStaysForBusyHandler(t *testing.T) {
	const n = 5000
	r := &followRecv{fakeRecv: newFakeRecv(n)}
	s := NewSubscriber(followSub{r}, Options{InFlight: 8, MaxInFlight: 64})
	// Checked before the last ack: once the backlog is handled the handler
	// does wait, and the window may grow a step then.
	consumeAll(t, s, n, true, func() { r.keptWindow(t, 8) })
}

// keptWindow fails t if the window grew or a Receive asked for more than
// window.
func (f *followRecv) keptWindow(t *testing.T, window int) {
	t.Helper()
	if got := f.windows(); len(got) > 0 {
		t.Errorf("window grew to %v", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.maxAsked > window {
		t.Errorf("a Receive asked for %d, want at most the starting window %d", f.maxAsked, window)
	}
}

// TestFixedWindowDoesNotGrow: without MaxInFlight the window is
// InFlight, however fast the handler.
func TestFixedWindowDoesNotGrow(t *testing.T) {
	const n = 5000
	r := &followRecv{fakeRecv: newFakeRecv(n)}
	s := NewSubscriber(followSub{r}, Options{InFlight: 8})
	consumeAll(t, s, n, false)
	r.keptWindow(t, 8)
}

// TestAdaptiveWindowHeldByBytes: the window grows no further than
// InFlightBytes holds at the messages' size.
func TestAdaptiveWindowHeldByBytes(t *testing.T) {
	const n, payload, bound = 5000, 1000, 32 << 10
	r := &followRecv{fakeRecv: newFakeRecv(n)}
	r.payload = payload
	s := NewSubscriber(followSub{r}, Options{InFlight: 4, MaxInFlight: 1024, InFlightBytes: bound})
	consumeAll(t, s, n, false)
	got := r.windows()
	if len(got) == 0 {
		t.Fatal("window never grew")
	}
	size := EncodedSize(&relay.Message{ID: "a", Payload: make([]byte, payload)})
	if last := got[len(got)-1]; last > bound/size {
		t.Errorf("window grew to %d messages of %d B, beyond the %d B bound (%d)", last, size, bound, bound/size)
	}
}

// TestAdaptiveWindowCappedByLimiter: a WindowLimiter's limit caps the
// growth as it caps the start.
func TestAdaptiveWindowCappedByLimiter(t *testing.T) {
	const n = 5000
	r := &limitedFollowRecv{followRecv{fakeRecv: newFakeRecv(n)}}
	s := NewSubscriber(limitedFollowSub{r}, Options{InFlight: 8, MaxInFlight: 1024})
	consumeAll(t, s, n, false)
	if got, want := r.windows(), []int{16, 20}; !slices.Equal(got, want) {
		t.Errorf("window grew to %v, want %v (the limit is 20)", got, want)
	}
}

type limitedFollowRecv struct{ followRecv }

func (*limitedFollowRecv) WindowLimit() int { return 20 }

type limitedFollowSub struct{ r *limitedFollowRecv }

func (f limitedFollowSub) Subscribe(context.Context, string) (Receiver, error) { return f.r, nil }
func (limitedFollowSub) Capabilities() relay.Capabilities                      { return relay.Capabilities{} }
func (limitedFollowSub) Close() error                                          { return nil }

func TestAdaptiveWindowHelper(t *testing.T) {
	if s, m := AdaptiveWindow(0, 64); s != 64 || m != DefaultMaxInFlight {
		t.Errorf("AdaptiveWindow(0, 64) = %d, %d; want 64, %d", s, m, DefaultMaxInFlight)
	}
	if s, m := AdaptiveWindow(10, 64); s != 10 || m != 10 {
		t.Errorf("AdaptiveWindow(10, 64) = %d, %d; want a fixed 10", s, m)
	}
}

// pushRecv is a followRecv whose Receive returns one message a call, as a
// broker that pushes deliveries (AMQP) has them: seldom a full batch.
type pushRecv struct{ *followRecv }

func (p pushRecv) Receive(ctx context.Context, _ int) ([]Received, error) {
	return p.followRecv.Receive(ctx, 1)
}

type pushSub struct{ r pushRecv }

func (f pushSub) Subscribe(context.Context, string) (Receiver, error) { return f.r, nil }
func (pushSub) Capabilities() relay.Capabilities                      { return relay.Capabilities{} }
func (pushSub) Close() error                                          { return nil }

// TestAdaptiveWindowFollowsPushedDeliveries: a broker that holds the
// window itself (a WindowFollower) and pushes deliveries a few at a time
// still grows the window of a handler that keeps up: a delivery that finds
// the handler idle while its settlements wait for their flush counts as a
// full batch would.
func TestAdaptiveWindowFollowsPushedDeliveries(t *testing.T) {
	const n = 300
	r := pushRecv{&followRecv{fakeRecv: newFakeRecv(n)}}
	r.cost = 100 * time.Microsecond // deliveries come apart: the handler waits for each
	// A linger longer than a delivery's gap on a loaded machine, so that the
	// acks still wait for their flush when the next delivery comes.
	s := NewSubscriber(pushSub{r}, Options{InFlight: 8, MaxInFlight: 64, SettleLinger: 100 * time.Millisecond})
	consumeAll(t, s, n, false)
	if got, want := r.windows(), []int{16, 32, 64}; !slices.Equal(got, want) {
		t.Errorf("window grew to %v, want %v", got, want)
	}
}

// TestIdleHandlerSharesFlushes: a handler that acks each message as it
// comes, and so holds nothing between deliveries, has its settlements sent
// at most once per SettleLinger, not one broker call per message.
func TestIdleHandlerSharesFlushes(t *testing.T) {
	const n = 300
	r := pushRecv{&followRecv{fakeRecv: newFakeRecv(n)}}
	r.cost = 100 * time.Microsecond // deliveries come apart: the handler waits for each
	s := NewSubscriber(pushSub{r}, Options{InFlight: 1000, SettleLinger: 50 * time.Millisecond})
	consumeAll(t, s, n, false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.settled) != n {
		t.Fatalf("%d settled, want %d", len(r.settled), n)
	}
	// About one call per 50ms of a run of 300 deliveries a millisecond or
	// more apart; one per message without the sharing.
	if len(r.calls) > n/5 {
		t.Errorf("%d Settle calls for %d messages acked one at a time by an idle handler; want them shared (at most %d)", len(r.calls), n, n/5)
	}
}
