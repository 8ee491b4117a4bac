package driver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// A PublishAsync still in flight when Close's grace period ends is
// cancelled, its done reports the cancellation before Close returns, and
// the driver is closed after it.
func TestPublishAsyncCloseWaitsForDone(t *testing.T) {
	f := &fakePub{block: make(chan struct{})}
	p := NewPublisher(f, 50*time.Millisecond)
	var doneErr atomic.Value
	var calls atomic.Int32
	if err := p.PublishAsync(context.Background(), "t", msgs(2), func(err error) {
		calls.Add(1)
		doneErr.Store(errBox{err})
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("done called %d times before Close returned, want 1", calls.Load())
	}
	if err := doneErr.Load().(errBox).err; !errors.Is(err, context.Canceled) {
		t.Fatalf("done got %v, want context.Canceled", err)
	}
	if !f.closed {
		t.Fatal("driver not closed")
	}
}

type errBox struct{ err error }

// PublishAsync blocks once DefaultAsyncInFlight calls are in flight, and
// returns ctx's error (done not called) when ctx ends while it waits.
func TestPublishAsyncBoundsCallsInFlight(t *testing.T) {
	f := &fakePub{block: make(chan struct{})}
	p := NewPublisher(f, time.Second)
	defer p.Close()
	var done atomic.Int32
	for i := range DefaultAsyncInFlight {
		if err := p.PublishAsync(context.Background(), "t", msgs(1), func(error) { done.Add(1) }); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	called := false
	err := p.PublishAsync(ctx, "t", msgs(1), func(error) { called = true })
	if !errors.Is(err, context.DeadlineExceeded) || called {
		t.Fatalf("call over the limit: %v (done called: %v), want DeadlineExceeded without done", err, called)
	}
	close(f.block)
	for done.Load() < DefaultAsyncInFlight {
		time.Sleep(time.Millisecond)
	}
	if err := p.PublishAsync(context.Background(), "t", msgs(1), func(error) { done.Add(1) }); err != nil {
		t.Fatalf("call after the others completed: %v", err)
	}
}

// Checks that fail before sending are returned, and done is not called.
func TestPublishAsyncEarlyErrors(t *testing.T) {
	p := NewPublisher(&fakePub{}, 0)
	called := false
	note := func(error) { called = true }
	if err := p.PublishAsync(context.Background(), "t", []*relay.Message{relay.NewMessage(make([]byte, 101))}, note); !errors.Is(err, relay.ErrMessageTooLarge) {
		t.Errorf("oversize: %v", err)
	}
	if err := p.PublishAsync(context.Background(), "t", msgs(1), nil); !errors.Is(err, errNoDone) {
		t.Errorf("nil done: %v", err)
	}
	_ = p.Close()
	if err := p.PublishAsync(context.Background(), "t", msgs(1), note); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if called {
		t.Error("done called for a call that returned an error")
	}
}
