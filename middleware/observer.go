package middleware

import (
	"context"
	"time"

	"github.com/go-relay/relay"
)

// Observer receives what the middleware of a chain did, so that outer
// middleware (metrics, tracing) can count and record it. Methods are
// called on the handler's goroutine and must not block.
type Observer interface {
	// Retried: Retry will run the handler again after Delay; Attempt is the
	// attempt that failed with Err.
	Retried(ctx context.Context, msg *relay.Message, ev RetryEvent)
	// Poisoned: PoisonQueue published msg to its poison topic because of err.
	Poisoned(ctx context.Context, msg *relay.Message, err error)
	// Deduplicated: Dedup acked msg without running the handler because
	// its key was already done.
	Deduplicated(ctx context.Context, msg *relay.Message, key string)
}

// RetryEvent describes one retry decision.
type RetryEvent struct {
	Attempt int           // the attempt that failed (1 = first)
	Err     error         // its error
	Delay   time.Duration // the wait before the next attempt, exactly as slept
}

type observersKey struct{}

// WithObserver returns a context whose middleware report to o, as well as
// to the observers ctx already had.
func WithObserver(ctx context.Context, o Observer) context.Context {
	prev, _ := ctx.Value(observersKey{}).([]Observer)
	next := make([]Observer, 0, len(prev)+1)
	next = append(next, prev...)
	next = append(next, o)
	return context.WithValue(ctx, observersKey{}, next)
}

func observers(ctx context.Context) []Observer {
	obs, _ := ctx.Value(observersKey{}).([]Observer)
	return obs
}
