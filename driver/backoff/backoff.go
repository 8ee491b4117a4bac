// Package backoff computes exponential delays with jitter, and runs the
// one retry loop that adapters use for the broker calls the shared layer
// of package driver does not make for them (reconnecting, declaring
// topology, fixing a start position): Retry.
package backoff

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff yields growing delays: Initial, ×2 each step, capped at Max, each
// drawn uniformly from [d/2, d] so that many clients do not retry in step.
// The zero value uses Initial 100ms and Max 5s. Not safe for concurrent use.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	n       int
}

// Next returns the next delay and advances.
func (b *Backoff) Next() time.Duration {
	initial, max := b.Initial, b.Max
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if max <= 0 {
		max = 5 * time.Second
	}
	d := initial
	for i := 0; i < b.n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	b.n++
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// Reset starts the sequence again (after a success).
func (b *Backoff) Reset() { b.n = 0 }

// Attempts is how many delays were handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.n }

// Sleep waits for Next() or until ctx is done; it reports whether the full
// delay passed.
func (b *Backoff) Sleep(ctx context.Context) bool { return b.SleepOr(ctx.Done()) }

// SleepOr waits for Next() or until done is closed (for loops stopped by a
// channel rather than a context); it reports whether the full delay passed.
func (b *Backoff) SleepOr(done <-chan struct{}) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// Retry calls try until it returns nil, or an error that again reports
// false for (again nil: every error is tried again), or ctx is done,
// waiting b's next delay after each failed call; b is Reset after a
// success. It returns nil; try's error that is not tried again, as it is;
// or, when ctx is done after a failed call, an error wrapping ctx's error
// and try's last one: "<ctx error> (last error: <error>)". try gets no
// ctx of its own: it bounds its call by the ctx it closes over.
func (b *Backoff) Retry(ctx context.Context, try func() error, again func(error) bool) error {
	for {
		err := try()
		if err == nil {
			b.Reset()
			return nil
		}
		if again != nil && !again(err) {
			return err
		}
		if ctx.Err() != nil || !b.Sleep(ctx) {
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		}
	}
}
