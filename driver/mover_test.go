package driver_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay/driver"
)

// fakeTask counts its calls; Move returns what next says.
type fakeTask struct {
	key    string
	moves  atomic.Int32
	closes atomic.Int32
	closed atomic.Bool // Move must not run after Close
	next   func(n int32) (time.Duration, error)
	moved  chan struct{}
}

func (f *fakeTask) Move(ctx context.Context) (time.Duration, error) {
	if f.closed.Load() {
		panic("Move after Close")
	}
	n := f.moves.Add(1)
	select {
	case f.moved <- struct{}{}:
	default:
	}
	return f.next(n)
}

func (f *fakeTask) Close(context.Context) {
	f.closed.Store(true)
	f.closes.Add(1)
}

type taskSet struct {
	mu    sync.Mutex
	tasks map[string][]*fakeTask
	fail  error
	next  func(n int32) (time.Duration, error)
}

func (s *taskSet) open(key string) (driver.MoveTask, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	t := &fakeTask{key: key, next: s.next, moved: make(chan struct{}, 1)}
	if s.tasks == nil {
		s.tasks = map[string][]*fakeTask{}
	}
	s.tasks[key] = append(s.tasks[key], t)
	return t, nil
}

func (s *taskSet) of(key string) []*fakeTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tasks[key]
}

func waitMove(t *testing.T, f *fakeTask) {
	t.Helper()
	select {
	case <-f.moved:
	case <-time.After(10 * time.Second):
		t.Fatalf("task %q was not called", f.key)
	}
}

// One loop per key however many holders it has; it runs until the last
// of them lets go, which closes its task once, after its last Move.
func TestMoverRefCounted(t *testing.T) {
	s := &taskSet{next: func(int32) (time.Duration, error) { return time.Millisecond, nil }}
	m := driver.NewMover(s.open, nil)
	ctx := context.Background()
	relA1, err := m.Acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	relA2, _ := m.Acquire("a")
	relB, _ := m.Acquire("b")
	if len(s.of("a")) != 1 || len(s.of("b")) != 1 {
		t.Fatalf("tasks opened: a %d, b %d; want one each", len(s.of("a")), len(s.of("b")))
	}
	a, b := s.of("a")[0], s.of("b")[0]
	waitMove(t, a)
	waitMove(t, b)

	relA1(ctx)
	relA1(ctx) // repeated: must not release the other holder's reference
	if a.closes.Load() != 0 {
		t.Fatal("the loop of a stopped while a holder was left")
	}
	waitMove(t, a) // still moving
	relA2(ctx)
	if a.closes.Load() != 1 {
		t.Fatalf("a closed %d times after its last release, want 1", a.closes.Load())
	}
	n := a.moves.Load()
	time.Sleep(20 * time.Millisecond)
	if a.moves.Load() != n {
		t.Fatal("the loop of a went on after its last release")
	}
	if b.closes.Load() != 0 {
		t.Fatal("releasing a stopped b")
	}
	relB(ctx)
	relB(ctx)
	if b.closes.Load() != 1 {
		t.Fatalf("b closed %d times", b.closes.Load())
	}

	// A key acquired again after its loop stopped gets a new task.
	relA3, _ := m.Acquire("a")
	if len(s.of("a")) != 2 {
		t.Fatalf("tasks of a: %d, want a second one", len(s.of("a")))
	}
	waitMove(t, s.of("a")[1])
	relA3(ctx)
}

// A failed Move is logged and made again after a backoff; the wait a
// successful Move asks for is kept, and the release of a loop that waits
// does not wait for the end of the wait.
func TestMoverRetriesAndWaits(t *testing.T) {
	boom := errors.New("boom")
	s := &taskSet{next: func(n int32) (time.Duration, error) {
		if n <= 2 {
			return 0, boom
		}
		return time.Hour, nil
	}}
	m := driver.NewMover(s.open, nil)
	rel, err := m.Acquire("k")
	if err != nil {
		t.Fatal(err)
	}
	task := s.of("k")[0]
	for range 3 {
		waitMove(t, task)
	}
	time.Sleep(20 * time.Millisecond)
	if n := task.moves.Load(); n != 3 {
		t.Fatalf("%d moves, want 3: two failed ones retried, then a wait of an hour", n)
	}
	done := make(chan struct{})
	go func() { rel(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("release waited for the loop's wait")
	}
	if task.closes.Load() != 1 {
		t.Fatal("task not closed")
	}
}

// An open that fails starts nothing, and the next Acquire tries again.
func TestMoverOpenFails(t *testing.T) {
	boom := errors.New("no client")
	s := &taskSet{fail: boom, next: func(int32) (time.Duration, error) { return time.Hour, nil }}
	m := driver.NewMover(s.open, nil)
	if rel, err := m.Acquire("k"); !errors.Is(err, boom) || rel != nil {
		t.Fatalf("Acquire = %v, %v; want the open error", rel != nil, err)
	}
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	rel, err := m.Acquire("k")
	if err != nil {
		t.Fatal(err)
	}
	waitMove(t, s.of("k")[0])
	rel(context.Background())
}
