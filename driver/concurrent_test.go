package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// limitedRecv is a Receiver declaring ReceiveLimits. It checks, under its
// lock, that what the calls in progress may bring plus what it returned
// and has not seen settled or released never exceeds window.
type limitedRecv struct {
	perCall, concurrent, window int

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced when the queue grows
	queue     []int
	next      int
	failNext  int // calls that fail before any message is taken
	failed    int
	inCalls   int // Receive calls in progress
	peakCalls int
	asked     int // sum of max of the calls in progress
	out       int // returned, not yet settled or released
	overflow  []string
	acked     map[int]int
}

func newLimitedRecv(perCall, concurrent, window int) *limitedRecv {
	return &limitedRecv{perCall: perCall, concurrent: concurrent, window: window,
		changed: make(chan struct{}), acked: map[int]int{}}
}

func (r *limitedRecv) ReceiveLimits() (int, int) { return r.perCall, r.concurrent }

func (r *limitedRecv) push(n int) {
	r.mu.Lock()
	for range n {
		r.queue = append(r.queue, r.next)
		r.next++
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func (r *limitedRecv) Receive(ctx context.Context, max int) ([]Received, error) {
	r.mu.Lock()
	r.inCalls++
	r.peakCalls = maxInt(r.peakCalls, r.inCalls)
	r.asked += max
	if max > r.perCall {
		r.overflow = append(r.overflow, fmt.Sprintf("asked for %d, more than %d per call", max, r.perCall))
	}
	if r.asked+r.out > r.window {
		r.overflow = append(r.overflow, fmt.Sprintf("%d asked by %d calls with %d held: window %d exceeded", r.asked, r.inCalls, r.out, r.window))
	}
	defer func() {
		r.inCalls--
		r.asked -= max
		r.mu.Unlock()
	}()
	if r.failNext > 0 {
		r.failNext--
		r.failed++
		return nil, errors.New("transient")
	}
	for len(r.queue) == 0 {
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			r.mu.Lock()
			return nil, ctx.Err()
		case <-ch:
		}
		r.mu.Lock()
	}
	n := min(max, len(r.queue))
	out := make([]Received, n)
	for i, h := range r.queue[:n] {
		out[i] = Received{Msg: &relay.Message{ID: fmt.Sprint(h), Payload: []byte("x")}, Handle: h}
	}
	r.queue = r.queue[n:]
	r.out += n
	return out, nil
}

func (r *limitedRecv) Settle(_ context.Context, b []Settle) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range b {
		if st.Ack {
			r.acked[st.Handle.(int)]++
		}
	}
	r.out -= len(b)
	return nil
}

func (r *limitedRecv) Release(_ context.Context, h []any) error {
	r.mu.Lock()
	r.out -= len(h)
	r.mu.Unlock()
	return nil
}

func (r *limitedRecv) Close(context.Context) error { return nil }

// TestConcurrentReceives: a receiver declaring 4 calls of at most 3 gets
// 4 Receive calls in flight at once, which together never ask for more
// than the window has free; every message arrives once and is acked once.
func TestConcurrentReceives(t *testing.T) {
	const window, total = 10, 2000
	r := newLimitedRecv(3, 4, window)
	s := NewSubscriber(recvSub{r}, Options{InFlight: window, InFlightBytes: -1})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	// With the queue empty, the loops take 3+3+3+1 slots and all wait.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		calls, asked := r.inCalls, r.asked
		r.mu.Unlock()
		if calls == 4 && asked == window {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Receive calls asking for %d in flight on an empty queue, want 4 asking for %d", calls, asked, window)
		}
		time.Sleep(time.Millisecond)
	}
	go func() {
		for range total / 100 {
			r.push(100)
		}
	}()
	seen := map[string]int{}
	for len(seen) < total {
		m := <-ch
		seen[m.ID]++
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.overflow {
		t.Error(o)
	}
	if r.peakCalls != 4 {
		t.Errorf("at most %d Receive calls at once, want 4", r.peakCalls)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s delivered %d times", id, n)
		}
	}
	if len(r.acked) != total {
		t.Errorf("%d messages acked, want %d", len(r.acked), total)
	}
	for h, n := range r.acked {
		if n != 1 {
			t.Errorf("message %d acked %d times", h, n)
		}
	}
	if r.out != 0 || len(r.queue) != 0 {
		t.Errorf("%d messages unsettled and %d queued after Close", r.out, len(r.queue))
	}
}

// logCount counts the records whose message contains a string.
type logCount struct {
	mu   sync.Mutex
	want string
	n    int
}

func (h *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCount) Handle(_ context.Context, rec slog.Record) error {
	if strings.Contains(rec.Message, h.want) {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
	return nil
}
func (h *logCount) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCount) WithGroup(string) slog.Handler      { return h }

// TestConcurrentReceiveErrors: failed calls of concurrent loops are
// retried by the shared layer (each logged as a retry), Health reports
// the failure meanwhile, and no message is lost.
func TestConcurrentReceiveErrors(t *testing.T) {
	const window, total, failures = 8, 200, 6
	r := newLimitedRecv(2, 3, window)
	r.failNext = failures
	logs := &logCount{want: "receive failed; retrying"}
	s := NewSubscriber(recvSub{r}, Options{InFlight: window, Logger: slog.New(logs)})
	ch, err := s.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		failed := r.failed
		r.mu.Unlock()
		if failed == failures {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d failures in 30s: failed calls are not retried", failed, failures)
		}
		time.Sleep(time.Millisecond)
	}
	if s.Health() == nil {
		t.Error("Health is nil while every Receive has failed")
	}
	r.push(total)
	seen := map[string]bool{}
	for len(seen) < total {
		m := <-ch
		seen[m.ID] = true
		_ = m.Ack()
	}
	if err := s.Health(); err != nil {
		t.Errorf("Health after receives succeeded again: %v", err)
	}
	_ = s.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.overflow {
		t.Error(o)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if r.failed != failures || logs.n != failures {
		t.Errorf("%d calls failed, %d retries logged, want %d of each", r.failed, logs.n, failures)
	}
	if len(r.acked) != total {
		t.Errorf("%d messages acked, want %d", len(r.acked), total)
	}
}
