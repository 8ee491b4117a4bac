package driver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakePub records batches and can fail chosen ones.
type fakePub struct {
	mu      sync.Mutex
	batches [][]string
	failAt  int   // 1-based batch number to fail as a whole (0 = none)
	failErr error // returned for that batch
	block   chan struct{}
	maxB    int
	closed  bool
}

func (f *fakePub) SendBatch(ctx context.Context, _ string, msgs []*relay.Message) error {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	f.batches = append(f.batches, ids)
	if len(f.batches) == f.failAt {
		return f.failErr
	}
	return nil
}
func (f *fakePub) Capabilities() relay.Capabilities {
	return relay.Capabilities{MaxBatch: f.maxB, MaxMessageBytes: 100, MaxMetadataKeys: 3}
}
func (f *fakePub) Close() error { f.closed = true; return nil }

func msgs(n int) []*relay.Message {
	out := make([]*relay.Message, n)
	for i := range out {
		out[i] = relay.NewMessage([]byte("x"))
	}
	return out
}

func TestPublisherChunksAndReportsUnsent(t *testing.T) {
	f := &fakePub{maxB: 3, failAt: 2, failErr: errors.New("broker down")}
	p := NewPublisher(f, 0)
	defer p.Close()
	ms := msgs(8)
	err := p.Publish(context.Background(), "t", ms...)
	var pe *relay.PublishError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *relay.PublishError", err)
	}
	// Batch 1 (3) succeeded, batch 2 failed, batch 3 was never sent.
	if len(f.batches) != 2 || len(pe.Failed) != 5 || pe.Failed[0].ID != ms[3].ID {
		t.Fatalf("batches %d, failed %d (%v)", len(f.batches), len(pe.Failed), pe.FailedIDs())
	}
}

func TestPublisherSingleBatchKeepsPlainError(t *testing.T) {
	boom := errors.New("boom")
	f := &fakePub{failAt: 1, failErr: boom}
	p := NewPublisher(f, 0)
	defer p.Close()
	if err := p.Publish(context.Background(), "t", msgs(2)...); err != boom {
		t.Fatalf("err = %v", err)
	}
}

// When the first of several batches fails as a whole, nothing of the call
// was accepted and the rest is not sent: Publish returns the plain error,
// as it does for one batch (driver.SendError's rule).
func TestPublisherFirstBatchFailedKeepsPlainError(t *testing.T) {
	boom := errors.New("boom")
	f := &fakePub{maxB: 3, failAt: 1, failErr: boom}
	p := NewPublisher(f, 0)
	defer p.Close()
	if err := p.Publish(context.Background(), "t", msgs(8)...); err != boom {
		t.Fatalf("err = %v, want the plain %v", err, boom)
	}
	if len(f.batches) != 1 {
		t.Fatalf("%d batches sent, want 1 (the rest not sent after the first failed)", len(f.batches))
	}
}

func TestPublisherValidatesBeforeSending(t *testing.T) {
	f := &fakePub{}
	p := NewPublisher(f, 0)
	defer p.Close()
	big := relay.NewMessage(make([]byte, 101))
	if err := p.Publish(context.Background(), "t", relay.NewMessage(nil), big); !errors.Is(err, relay.ErrMessageTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	many := relay.NewMessage(nil)
	many.Metadata = relay.Metadata{"a": "", "b": "", "c": "", "d": ""}
	if err := p.Publish(context.Background(), "t", many); !errors.Is(err, relay.ErrLimit) {
		t.Fatalf("metadata keys: %v", err)
	}
	if err := p.Publish(context.Background(), "", relay.NewMessage(nil)); !errors.Is(err, relay.ErrInvalidTopic) {
		t.Fatalf("empty topic: %v", err)
	}
	noID := &relay.Message{Payload: []byte("p")}
	if err := p.Publish(context.Background(), "t", noID); err != nil || noID.ID == "" {
		t.Fatalf("message without ID: %v, ID %q", err, noID.ID)
	}
	if len(f.batches) != 1 {
		t.Fatalf("%d batches sent, want only the valid one", len(f.batches))
	}
}

func TestPublisherCloseCancelsAfterGrace(t *testing.T) {
	f := &fakePub{block: make(chan struct{})}
	p := NewPublisher(f, 50*time.Millisecond)
	errc := make(chan error, 1)
	started := make(chan struct{})
	go func() { close(started); errc <- p.Publish(context.Background(), "t", msgs(1)...) }()
	<-started
	time.Sleep(20 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("in-flight publish after Close grace = %v, want context.Canceled", err)
	}
	if !f.closed {
		t.Fatal("driver not closed")
	}
	if err := p.Publish(context.Background(), "t", msgs(1)...); !errors.Is(err, relay.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// fakeRecv serves queued messages and records what the shared layer does.
type fakeRecv struct {
	mu       sync.Mutex
	queue    []driver_handle
	wake     chan struct{}
	maxAsked int
	settled  []Settle
	calls    []int // length of each Settle batch
	released []any
	extended [][]any
	closed   bool
	failNext int // Receive fails this many times first
	empties  int // then answers empty this many times
	native   bool
	payload  int           // payload bytes of every message
	asked    []int         // max of every Receive that returned messages
	cost     time.Duration // every Receive that returns messages takes this long first
}

type driver_handle = int

func newFakeRecv(n int) *fakeRecv {
	r := &fakeRecv{wake: make(chan struct{}, 1)}
	for i := 0; i < n; i++ {
		r.queue = append(r.queue, i)
	}
	return r
}

func (r *fakeRecv) Receive(ctx context.Context, max int) ([]Received, error) {
	for {
		r.mu.Lock()
		if r.failNext > 0 {
			r.failNext--
			r.mu.Unlock()
			return nil, errors.New("transient")
		}
		if r.empties > 0 {
			r.empties--
			r.mu.Unlock()
			return nil, nil
		}
		r.maxAsked = maxInt(r.maxAsked, max)
		if len(r.queue) > 0 {
			if r.cost > 0 {
				r.mu.Unlock()
				time.Sleep(r.cost)
				r.mu.Lock()
			}
			r.asked = append(r.asked, max)
			n := min(max, len(r.queue))
			out := make([]Received, n)
			for i := range out {
				h := r.queue[i]
				out[i] = Received{Msg: &relay.Message{ID: string(rune('a' + h)), Payload: make([]byte, r.payload)}, Attempt: 1, Handle: h}
			}
			r.queue = r.queue[n:]
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
func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}
func (r *fakeRecv) Settle(_ context.Context, b []Settle) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled = append(r.settled, b...)
	r.calls = append(r.calls, len(b))
	return nil
}
func (r *fakeRecv) Release(_ context.Context, h []any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released = append(r.released, h...)
	return nil
}
func (r *fakeRecv) Extend(_ context.Context, h []any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extended = append(r.extended, h)
	return nil
}
func (r *fakeRecv) Close(context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

type fakeSub struct {
	r      *fakeRecv
	closed bool
}

func (f *fakeSub) Subscribe(context.Context, string) (Receiver, error) { return f.r, nil }
func (f *fakeSub) Capabilities() relay.Capabilities {
	return relay.Capabilities{NativeDelay: f.r.native}
}
func (f *fakeSub) Close() error { f.closed = true; return nil }

func TestWindowBoundsReceive(t *testing.T) {
	r := newFakeRecv(10)
	s := NewSubscriber(&fakeSub{r: r}, Options{InFlight: 4})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	var held []*relay.Message
	for i := 0; i < 4; i++ {
		held = append(held, <-ch)
	}
	select {
	case m := <-ch:
		t.Fatalf("fifth message %s delivered with a window of 4", m.ID)
	case <-time.After(100 * time.Millisecond):
	}
	_ = held[0].Ack()
	m5 := <-ch
	_ = m5.Nack()
	_ = s.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxAsked > 4 {
		t.Errorf("Receive asked for %d, window is 4", r.maxAsked)
	}
	if len(r.settled) != 2 || !r.settled[0].Ack || r.settled[1].Ack {
		t.Errorf("settled %+v, want ack then nack", r.settled)
	}
	// The 3 held unsettled messages, plus 1 if the slot the nack freed was
	// refilled before Close (it was fetched but not yet delivered).
	rel := map[any]bool{}
	for _, h := range r.released {
		rel[h] = true
	}
	for _, m := range held[1:] {
		if h := int(m.ID[0] - 'a'); !rel[h] {
			t.Errorf("held message %s (handle %d) not released", m.ID, h)
		}
	}
	if len(r.released) < 3 || len(r.released) > 4 {
		t.Errorf("released %d handles, want the 3 held (+1 prefetched)", len(r.released))
	}
	if !r.closed {
		t.Error("receiver not closed")
	}
	for _, m := range held[1:] {
		if err := m.Ack(); !errors.Is(err, relay.ErrSubscriptionEnded) {
			t.Errorf("Ack after Close = %v", err)
		}
	}
}

func TestEmulatedDelayHoldsThenNacks(t *testing.T) {
	r := newFakeRecv(2)
	s := NewSubscriber(&fakeSub{r: r}, Options{})
	ch, _ := s.Subscribe(context.Background(), "t")
	m := <-ch
	start := time.Now()
	_ = m.NackAfter(150 * time.Millisecond)
	var waited time.Duration
	for {
		r.mu.Lock()
		n := len(r.settled)
		r.mu.Unlock()
		if n == 1 {
			waited = time.Since(start)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.mu.Lock()
	got := r.settled[0]
	r.mu.Unlock()
	if got.Ack || got.Delay != 0 || got.Handle != 0 {
		t.Fatalf("settled %+v, want a plain nack of handle 0", got)
	}
	if waited < 140*time.Millisecond {
		t.Fatalf("nack passed to the broker after %v, before the delay", waited)
	}
	// A delayed nack still pending at close is released.
	m2 := <-ch
	_ = m2.NackAfter(time.Hour)
	_ = s.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.released) != 1 || r.released[0] != 1 {
		t.Fatalf("released %v, want handle 1", r.released)
	}
}

func TestNativeDelayPassedThrough(t *testing.T) {
	r := newFakeRecv(1)
	r.native = true
	s := NewSubscriber(&fakeSub{r: r}, Options{})
	ch, _ := s.Subscribe(context.Background(), "t")
	_ = (<-ch).NackAfter(time.Minute)
	_ = s.Close()
	if len(r.settled) != 1 || r.settled[0].Delay != time.Minute {
		t.Fatalf("settled %+v", r.settled)
	}
}

func TestExtendAndRetryReceive(t *testing.T) {
	r := newFakeRecv(1)
	r.failNext = 2
	s := NewSubscriber(&fakeSub{r: r}, Options{ExtendEvery: 20 * time.Millisecond})
	ch, _ := s.Subscribe(context.Background(), "t")
	m := <-ch // arrives after two failed receives
	time.Sleep(100 * time.Millisecond)
	_ = m.Ack()
	_ = s.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.extended) == 0 || r.extended[0][0] != 0 {
		t.Fatalf("extended %v, want handle 0 extended while held", r.extended)
	}
}

func TestSubscribeAfterCloseAndProvisionUnsupported(t *testing.T) {
	s := NewSubscriber(&fakeSub{r: newFakeRecv(0)}, Options{})
	if err := s.Provision(context.Background(), "t"); !errors.Is(err, relay.ErrNotSupported) {
		t.Fatalf("Provision = %v", err)
	}
	_ = s.Close()
	if _, err := s.Subscribe(context.Background(), "t"); !errors.Is(err, relay.ErrClosed) {
		t.Fatalf("Subscribe after Close = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestHealthReflectsReceiveFailures(t *testing.T) {
	r := newFakeRecv(1)
	r.failNext = 1 << 30
	s := NewSubscriber(&fakeSub{r: r}, Options{})
	if err := s.Health(); err != nil {
		t.Fatalf("Health before subscribing = %v", err)
	}
	_, _ = s.Subscribe(context.Background(), "t")
	deadline := time.Now().Add(5 * time.Second)
	for s.Health() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Health(); err == nil {
		t.Fatal("Health stayed nil while every receive failed")
	}
	_ = s.Close()
	if err := s.Health(); !errors.Is(err, relay.ErrClosed) {
		t.Fatalf("Health after Close = %v", err)
	}
}
