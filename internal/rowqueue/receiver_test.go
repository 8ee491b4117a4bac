package rowqueue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeTable records what the receiver sends and serves rows from a list.
type fakeTable struct {
	mu       sync.Mutex
	rows     []int64 // claimable
	acked    []int64
	claims   int
	failNext error
	released []int64
	closed   []int64
}

func (f *fakeTable) Claim(_ context.Context, max int, acks []int64) ([]driver.Received, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims++
	if err := f.failNext; err != nil {
		f.failNext = nil
		return nil, err
	}
	f.acked = append(f.acked, acks...)
	n := min(max, len(f.rows))
	var out []driver.Received
	for _, id := range f.rows[:n] {
		out = append(out, driver.Received{Msg: &relay.Message{ID: "m"}, Handle: id, Attempt: 1})
	}
	f.rows = f.rows[n:]
	return out, nil
}

func (f *fakeTable) NextDue(context.Context) (time.Duration, bool, error) { return 0, false, nil }

func (f *fakeTable) Settle(_ context.Context, acks []int64, nacks []Nack) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acked = append(f.acked, acks...)
	for _, n := range nacks {
		if n.Delay <= 0 {
			f.rows = append(f.rows, n.ID)
		}
	}
	return nil
}

func (f *fakeTable) Extend(context.Context, []int64) error { return nil }

func (f *fakeTable) Release(_ context.Context, acks, ids []int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acked = append(f.acked, acks...)
	f.released = append(f.released, ids...)
	return nil
}

func (f *fakeTable) Close(_ context.Context, acks []int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = append(f.closed, acks...)
	return nil
}

func (f *fakeTable) ackedIDs() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.acked)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Acks that Settle keeps for the next claim reach the table while Receive
// waits for messages (polling practically off), because Settle wakes it;
// a nack due at once is claimed again by the same wait.
func TestSettleWakesWaitingReceive(t *testing.T) {
	f := &fakeTable{rows: []int64{1, 2}}
	r := NewReceiver(f, make(chan struct{}, 1), time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got, err := r.Receive(ctx, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("Receive: %d messages, %v; want 2", len(got), err)
	}
	done := make(chan []driver.Received, 1)
	go func() {
		out, _ := r.Receive(ctx, 10)
		done <- out
	}()
	waitFor(t, "waiting Receive", r.Waiting)
	if err := r.Settle(ctx, []driver.Settle{{Handle: int64(1), Ack: true}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ack at the table", func() bool { return slices.Equal(f.ackedIDs(), []int64{1}) })
	waitFor(t, "waiting Receive after the ack", r.Waiting)
	if err := r.Settle(ctx, []driver.Settle{{Handle: int64(2)}}); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-done:
		if len(out) != 1 || out[0].Handle != int64(2) {
			t.Fatalf("Receive after the nack returned %v, want row 2", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the nack did not wake Receive")
	}
}

// A claim that fails keeps its acks for the next one; Release and Close
// send what is left.
func TestAcksSurviveFailedClaim(t *testing.T) {
	f := &fakeTable{rows: []int64{1, 2, 3}}
	r := NewReceiver(f, make(chan struct{}, 1), time.Hour)
	ctx := context.Background()
	if _, err := r.Receive(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(ctx, []driver.Settle{{Handle: int64(1), Ack: true}}); err != nil {
		t.Fatal(err)
	}
	f.rows = []int64{4}
	f.failNext = errors.New("database locked")
	if _, err := r.Receive(ctx, 1); err == nil {
		t.Fatal("Receive hid the claim's error")
	}
	if len(f.ackedIDs()) != 0 {
		t.Fatalf("acks %v sent by a failed claim", f.ackedIDs())
	}
	if out, err := r.Receive(ctx, 1); err != nil || len(out) != 1 {
		t.Fatalf("Receive: %v, %v", out, err)
	}
	if !slices.Equal(f.ackedIDs(), []int64{1}) {
		t.Fatalf("acked %v after the retried claim, want [1]", f.ackedIDs())
	}
	_ = r.Settle(ctx, []driver.Settle{{Handle: int64(2), Ack: true}})
	if err := r.Release(ctx, []any{int64(3)}); err != nil {
		t.Fatal(err)
	}
	_ = r.Settle(ctx, []driver.Settle{{Handle: int64(4), Ack: true}})
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.ackedIDs(), []int64{1, 2}) || !slices.Equal(f.released, []int64{3}) || !slices.Equal(f.closed, []int64{4}) {
		t.Fatalf("acked %v released %v closed %v; want [1 2] [3] [4]", f.ackedIDs(), f.released, f.closed)
	}
}

// A receiver that never waits (a steady backlog) keeps few due times
// however many delayed nacks it sends: the past ones go at the next nack,
// and of the future ones at most maxDue, the earliest, which it still
// wakes for.
func TestDueTimesStayBounded(t *testing.T) {
	f := &fakeTable{}
	r := NewReceiver(f, make(chan struct{}, 1), time.Hour)
	ctx := context.Background()
	for i := range 3000 {
		if err := r.Settle(ctx, []driver.Settle{{Handle: int64(i), Delay: time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	if err := r.Settle(ctx, []driver.Settle{{Handle: int64(-1), Delay: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if n := len(r.due); n > 1 {
		t.Errorf("%d due times kept after every earlier one passed, want 1", n)
	}
	soon := time.Now().Add(time.Minute)
	for i := range 3000 {
		if err := r.Settle(ctx, []driver.Settle{{Handle: int64(i), Delay: time.Hour + time.Duration(i)*time.Second}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Settle(ctx, []driver.Settle{{Handle: int64(-2), Delay: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if n := len(r.due); n > maxDue {
		t.Errorf("%d due times kept, want at most %d", n, maxDue)
	}
	if wait, _ := r.startWait(time.Hour); wait > time.Until(soon)+time.Second {
		t.Errorf("waits %v, want at most until the earliest due time (about 1m)", wait)
	}
}

// stallingTable is a fakeTable whose claims wait for gate, as a database
// call does, and fail with their context's error when it ended meanwhile.
type stallingTable struct {
	fakeTable
	entered chan struct{}
	gate    chan struct{}
}

func (s *stallingTable) Claim(ctx context.Context, max int, acks []int64) ([]driver.Received, error) {
	s.entered <- struct{}{}
	<-s.gate
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.fakeTable.Claim(ctx, max, acks)
}

// A claim in flight when the subscription's context ends is not cut off:
// it carries acks, and a database claim stopped between its statements
// keeps their rows locked against the Close that sends them again.
func TestClaimOutlivesEndedContext(t *testing.T) {
	ft := &stallingTable{fakeTable: fakeTable{rows: []int64{1, 2}}, entered: make(chan struct{}), gate: make(chan struct{})}
	r := NewReceiver(ft, make(chan struct{}, 1), time.Hour)
	if err := r.Settle(context.Background(), []driver.Settle{{Handle: int64(7), Ack: true}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		out []driver.Received
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := r.Receive(ctx, 10)
		done <- result{out, err}
	}()
	<-ft.entered
	cancel()
	close(ft.gate)
	res := <-done
	if res.err != nil || len(res.out) != 2 {
		t.Fatalf("Receive after the context ended mid-claim: %d messages, %v; want the claim's 2 rows", len(res.out), res.err)
	}
	if got := ft.ackedIDs(); !slices.Equal(got, []int64{7}) {
		t.Fatalf("acked %v with the claim, want [7]", got)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(ft.closed) != 0 {
		t.Fatalf("Close sent acks %v again", ft.closed)
	}
}

// A claim that does not end by itself is cut off claimGrace after the
// subscription's context, so that a database that stopped answering does
// not hold the subscription's end.
func TestClaimCutOffAfterGrace(t *testing.T) {
	defer func(g time.Duration) { claimGrace = g }(claimGrace)
	claimGrace = 20 * time.Millisecond
	hung := claimFunc(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	r := NewReceiver(hung, make(chan struct{}, 1), time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.Receive(ctx, 1)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // the claim is under way
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Receive with a hung claim: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a hung claim outlived its grace after the context ended")
	}
}

// The grace runs from the end of the subscription's context, not from
// the claim's start: a slow claim of a live subscription is not cut off.
func TestSlowClaimNotCutOff(t *testing.T) {
	defer func(g time.Duration) { claimGrace = g }(claimGrace)
	claimGrace = 20 * time.Millisecond
	slow := claimFunc(func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * claimGrace):
			return errors.New("claimed")
		}
	})
	r := NewReceiver(slow, make(chan struct{}, 1), time.Hour)
	if _, err := r.Receive(context.Background(), 1); err == nil || err.Error() != "claimed" {
		t.Fatalf("Receive with a slow claim: %v, want the claim's own result", err)
	}
}

// No claim starts once the subscription's context ended, unless it has
// acks to carry.
func TestNoClaimAfterEnd(t *testing.T) {
	f := &fakeTable{rows: []int64{1}}
	r := NewReceiver(f, make(chan struct{}, 1), time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out, err := r.Receive(ctx, 1); !errors.Is(err, context.Canceled) || len(out) != 0 {
		t.Fatalf("Receive after the end: %d messages, %v; want none, context.Canceled", len(out), err)
	}
	if f.claims != 0 {
		t.Fatalf("%d claims after the end, want none", f.claims)
	}
}

// claimFunc is a Table whose claims run the function.
type claimFunc func(ctx context.Context) error

func (f claimFunc) Claim(ctx context.Context, _ int, _ []int64) ([]driver.Received, error) {
	return nil, f(ctx)
}
func (claimFunc) NextDue(context.Context) (time.Duration, bool, error) { return 0, false, nil }
func (claimFunc) Settle(context.Context, []int64, []Nack) error        { return nil }
func (claimFunc) Extend(context.Context, []int64) error                { return nil }
func (claimFunc) Release(context.Context, []int64, []int64) error      { return nil }
func (claimFunc) Close(context.Context, []int64) error                 { return nil }
