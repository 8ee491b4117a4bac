package middleware

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// RetryConfig configures Retry. Zero values take the documented defaults;
// no zero value means "never retry".
type RetryConfig struct {
	// MaxAttempts is how many times the handler runs for one delivery,
	// counting the first. Default 3; 1 disables retrying.
	MaxAttempts int
	// InitialInterval is the wait before the second attempt. Default 100ms.
	InitialInterval time.Duration
	// MaxInterval caps every wait. Default 10s (or InitialInterval if larger).
	MaxInterval time.Duration
	// Multiplier grows the wait after each retry; at least 1. Default 2.
	Multiplier float64
	// Jitter is the fraction of each wait that is random: a wait d becomes
	// a value in [d×(1-Jitter), d]. In [0, 1]; default 0.5. Set NoJitter
	// for exact waits.
	Jitter   float64
	NoJitter bool
	// MaxElapsed stops retrying when the next wait would end later than
	// MaxElapsed after the first attempt started. 0: no limit.
	MaxElapsed time.Duration
	// Retryable reports whether err is worth another attempt. Default:
	// every error not marked with relay.Permanent. Permanent errors are
	// never retried, whatever Retryable says.
	Retryable func(err error) bool
	// OnRetry is called before each wait with the delay that will be
	// slept (computed once: reporting it does not advance the backoff).
	OnRetry func(ctx context.Context, msg *relay.Message, ev RetryEvent)

	// Now and After replace the clock in tests. After must behave like
	// time.After.
	Now   func() time.Time
	After func(d time.Duration) <-chan time.Time
	// Rand returns a float in [0, 1) for the jitter. Default math/rand/v2.
	Rand func() float64
}

func (c *RetryConfig) setDefaults() {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.InitialInterval == 0 {
		c.InitialInterval = 100 * time.Millisecond
	}
	if c.MaxInterval == 0 {
		c.MaxInterval = max(10*time.Second, c.InitialInterval)
	}
	if c.Multiplier == 0 {
		c.Multiplier = 2
	}
	if c.Jitter == 0 && !c.NoJitter {
		c.Jitter = 0.5
	}
	if c.NoJitter {
		c.Jitter = 0
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.After == nil {
		c.After = time.After
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
}

// Validate reports every problem of c (after defaults) at once.
func (c RetryConfig) Validate() error {
	c.setDefaults()
	var errs []error
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("retry: MaxAttempts %d < 1", c.MaxAttempts))
	}
	if c.InitialInterval < 0 {
		errs = append(errs, fmt.Errorf("retry: InitialInterval %v is negative", c.InitialInterval))
	}
	if c.MaxInterval < c.InitialInterval {
		errs = append(errs, fmt.Errorf("retry: MaxInterval %v < InitialInterval %v", c.MaxInterval, c.InitialInterval))
	}
	if c.Multiplier < 1 || math.IsNaN(c.Multiplier) || math.IsInf(c.Multiplier, 0) {
		errs = append(errs, fmt.Errorf("retry: Multiplier %v not a finite number ≥ 1", c.Multiplier))
	}
	if c.Jitter < 0 || c.Jitter > 1 || math.IsNaN(c.Jitter) {
		errs = append(errs, fmt.Errorf("retry: Jitter %v not in [0, 1]", c.Jitter))
	}
	if c.MaxElapsed < 0 {
		errs = append(errs, fmt.Errorf("retry: MaxElapsed %v is negative", c.MaxElapsed))
	}
	return errors.Join(errs...)
}

// Why Retry stopped.
const (
	RetryExhausted   = "exhausted"   // MaxAttempts reached
	RetryPermanent   = "permanent"   // the error is not retryable
	RetryElapsed     = "elapsed"     // MaxElapsed reached
	RetryInterrupted = "interrupted" // ctx done or the router is stopping
)

// RetryError is returned by Retry when it gives up. It wraps the last
// handler error (errors.Is/As see through it, also relay.IsPermanent).
type RetryError struct {
	Attempts    int       // handler runs in this delivery
	FirstFailed time.Time // when the first attempt failed
	LastFailed  time.Time // when the last attempt failed
	Reason      string    // RetryExhausted, RetryPermanent, RetryElapsed or RetryInterrupted
	Err         error     // the last handler error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("retry %s after %d attempt(s): %v", e.Reason, e.Attempts, e.Err)
}

func (e *RetryError) Unwrap() error { return e.Err }

// Interrupted reports whether Retry stopped because of shutdown rather than
// because the message failed for good; such a message must be redelivered,
// not poisoned.
func (e *RetryError) Interrupted() bool { return e.Reason == RetryInterrupted }

// Retry runs the rest of the chain again when it fails, with exponential
// backoff and jitter, in process, while the message stays unsettled (so the
// handler's lane keeps its order). Each attempt gets the ctx Retry got, so
// a Timeout inside Retry applies per attempt. Outputs of failed attempts
// are dropped. A wait is cut short when ctx is done or the router begins to
// shut down (router.Stopping); Retry then returns a *RetryError with Reason
// RetryInterrupted. When it gives up, it returns a *RetryError wrapping the
// last error. The middleware is marked router.Retrying, so an at-most-once
// handler refuses it.
func Retry(cfg RetryConfig) (router.Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return router.Retrying(func(next router.Handler) router.Handler {
		return func(ctx context.Context, msg *relay.Message) ([]*relay.Message, error) {
			return cfg.run(ctx, msg, next)
		}
	}), nil
}

func (c *RetryConfig) run(ctx context.Context, msg *relay.Message, next router.Handler) ([]*relay.Message, error) {
	start := c.Now()
	var first time.Time
	interval := float64(c.InitialInterval)
	for attempt := 1; ; attempt++ {
		outs, err := next(ctx, msg)
		if err == nil {
			return outs, nil
		}
		now := c.Now()
		if attempt == 1 {
			first = now
		}
		giveUp := func(reason string) error {
			return &RetryError{Attempts: attempt, FirstFailed: first, LastFailed: now, Reason: reason, Err: err}
		}
		if relay.IsPermanent(err) || (c.Retryable != nil && !c.Retryable(err)) {
			return nil, giveUp(RetryPermanent)
		}
		if attempt >= c.MaxAttempts {
			return nil, giveUp(RetryExhausted)
		}
		if ctx.Err() != nil {
			return nil, giveUp(RetryInterrupted)
		}
		delay := time.Duration(min(interval, float64(c.MaxInterval)))
		if c.Jitter > 0 {
			delay -= time.Duration(c.Jitter * c.Rand() * float64(delay))
		}
		interval *= c.Multiplier
		if c.MaxElapsed > 0 && now.Add(delay).Sub(start) > c.MaxElapsed {
			return nil, giveUp(RetryElapsed)
		}
		ev := RetryEvent{Attempt: attempt, Err: err, Delay: delay}
		if c.OnRetry != nil {
			c.OnRetry(ctx, msg, ev)
		}
		for _, o := range observers(ctx) {
			o.Retried(ctx, msg, ev)
		}
		select {
		case <-c.After(delay):
		case <-ctx.Done():
			return nil, giveUp(RetryInterrupted)
		case <-router.Stopping(ctx):
			return nil, giveUp(RetryInterrupted)
		}
	}
}
