package backoff

import (
	"context"
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
