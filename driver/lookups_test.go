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

func TestLookupsShareOneCallAndRemember(t *testing.T) {
	var l driver.Lookups[string]
	var calls atomic.Int32
	release := make(chan struct{})
	find := func(context.Context) (string, error) {
		calls.Add(1)
		<-release
		return "url-of-q", nil
	}
	const callers = 8
	got := make(chan string, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			v, err := l.Get(context.Background(), "q", find)
			if err != nil {
				t.Error(err)
			}
			got <- v
		})
	}
	// Every caller is in Get before the one call answers.
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if _, ok := l.Cached("q"); ok {
		t.Error("Cached answered while the call was running")
	}
	close(release)
	wg.Wait()
	close(got)
	for v := range got {
		if v != "url-of-q" {
			t.Errorf("Get = %q, want url-of-q", v)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d calls for %d concurrent Gets of one key, want 1", n, callers)
	}
	if v, err := l.Get(context.Background(), "q", find); v != "url-of-q" || err != nil || calls.Load() != 1 {
		t.Errorf("Get after success = %q, %v with %d calls; want the remembered value, no call", v, err, calls.Load())
	}
	if v, ok := l.Cached("q"); !ok || v != "url-of-q" {
		t.Errorf("Cached = %q, %v; want url-of-q, true", v, ok)
	}
	if _, ok := l.Cached("other"); ok {
		t.Error("Cached answered for a key never looked up")
	}
}

func TestLookupsForgetFailuresAndDroppedKeys(t *testing.T) {
	var l driver.Lookups[int]
	var calls int
	boom := errors.New("broker down")
	find := func(context.Context) (int, error) {
		calls++
		if calls == 1 {
			return 0, boom
		}
		return calls, nil
	}
	if _, err := l.Get(context.Background(), "k", find); !errors.Is(err, boom) {
		t.Fatalf("first Get: %v, want %v", err, boom)
	}
	if _, ok := l.Cached("k"); ok {
		t.Error("a failed call was remembered")
	}
	if v, err := l.Get(context.Background(), "k", find); v != 2 || err != nil {
		t.Fatalf("Get after a failure = %d, %v; want a new call's 2", v, err)
	}
	l.Forget("k")
	if _, ok := l.Cached("k"); ok {
		t.Error("Cached answered after Forget")
	}
	if v, err := l.Get(context.Background(), "k", find); v != 3 || err != nil {
		t.Fatalf("Get after Forget = %d, %v; want a new call's 3", v, err)
	}
}

// A caller waiting for another's call gets a value of its own when that
// call fails because the other caller's ctx ended.
func TestLookupsWaiterCallsAgainWhenTheCallItWaitedForFails(t *testing.T) {
	var l driver.Lookups[string]
	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	started := make(chan struct{})
	var calls atomic.Int32
	find := func(ctx context.Context) (string, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "found", nil
	}
	leaderErr := make(chan error, 1)
	go func() {
		_, err := l.Get(leaderCtx, "k", find)
		leaderErr <- err
	}()
	<-started
	waiter := make(chan string, 1)
	go func() {
		v, err := l.Get(context.Background(), "k", find)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waiter <- v
	}()
	time.Sleep(20 * time.Millisecond) // the waiter waits for the first call
	cancelLeader()
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: %v, want its ctx's error", err)
	}
	if v := <-waiter; v != "found" {
		t.Errorf("waiter got %q, want found from a call of its own", v)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls, want 2", n)
	}
}

func TestLookupsWaiterStopsWhenItsCtxEnds(t *testing.T) {
	var l driver.Lookups[string]
	release := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_, _ = l.Get(context.Background(), "k", func(context.Context) (string, error) {
			close(started)
			<-release
			return "v", nil
		})
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := l.Get(ctx, "k", func(context.Context) (string, error) { return "second call", nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with an ending ctx: %v, want %v", err, context.DeadlineExceeded)
	}
	close(release)
}

// Forget during a call: the call still answers its waiters, but the next
// Get calls again.
func TestLookupsForgetDuringACall(t *testing.T) {
	var l driver.Lookups[int]
	release := make(chan struct{})
	started := make(chan struct{})
	var calls atomic.Int32
	first := make(chan int, 1)
	go func() {
		v, _ := l.Get(context.Background(), "k", func(context.Context) (int, error) {
			calls.Add(1)
			close(started)
			<-release
			return 1, nil
		})
		first <- v
	}()
	<-started
	l.Forget("k")
	close(release)
	if v := <-first; v != 1 {
		t.Errorf("the running call answered %d, want 1", v)
	}
	v, err := l.Get(context.Background(), "k", func(context.Context) (int, error) { calls.Add(1); return 2, nil })
	if v != 2 || err != nil || calls.Load() != 2 {
		t.Errorf("Get after Forget during a call = %d, %v with %d calls; want a new call's 2", v, err, calls.Load())
	}
}
