package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleepOr(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	long := Backoff{Initial: time.Hour, Max: time.Hour}
	if long.SleepOr(closed) {
		t.Error("SleepOr reported the full delay although done was closed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if long.Sleep(ctx) {
		t.Error("Sleep reported the full delay although ctx was done")
	}
	if long.Attempts() != 2 {
		t.Errorf("Attempts = %d, want 2", long.Attempts())
	}
	short := Backoff{Initial: time.Nanosecond, Max: time.Nanosecond}
	if !short.SleepOr(make(chan struct{})) || !short.Sleep(context.Background()) {
		t.Error("a short delay did not pass")
	}
}

func TestNextGrowsWithinBounds(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for i, ceil := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		ceil *= time.Millisecond
		if d := b.Next(); d < ceil/2 || d > ceil {
			t.Errorf("step %d: %v outside [%v, %v]", i, d, ceil/2, ceil)
		}
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Errorf("after Reset: %v", d)
	}
}

func TestRetry(t *testing.T) {
	fast := Backoff{Initial: time.Nanosecond, Max: time.Nanosecond}
	calls := 0
	flaky := errors.New("flaky")
	err := fast.Retry(context.Background(), func() error {
		calls++
		if calls < 3 {
			return flaky
		}
		return nil
	}, nil)
	if err != nil || calls != 3 || fast.Attempts() != 0 {
		t.Fatalf("Retry = %v after %d calls (Attempts %d); want nil after 3, reset", err, calls, fast.Attempts())
	}

	permanent := errors.New("permanent")
	calls = 0
	err = fast.Retry(context.Background(), func() error {
		calls++
		if calls < 2 {
			return flaky
		}
		return permanent
	}, func(err error) bool { return err == flaky })
	if err != permanent || calls != 2 {
		t.Fatalf("Retry = %v after %d calls; want the permanent error as it is after 2", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	slow := Backoff{Initial: time.Hour, Max: time.Hour}
	err = slow.Retry(ctx, func() error {
		calls++
		cancel()
		return flaky
	}, nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, flaky) || calls != 1 {
		t.Fatalf("Retry = %v after %d calls; want one call and an error wrapping ctx's and the last one", err, calls)
	}
}
