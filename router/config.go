package router

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-relay/relay"
)

// Defaults of Config.
const (
	DefaultCloseTimeout          = 30 * time.Second
	DefaultRedeliveryInitial     = time.Second
	DefaultRedeliveryMax         = time.Minute
	DefaultQueueSize             = 8
	hardStopGrace                = time.Second
	subscriptionEndWait          = 10 * time.Second
	maxConcurrency               = 4096
	redeliveryMaxDoublingAttempt = 30
)

// Config configures a Router. The zero value is usable.
type Config struct {
	// CloseTimeout bounds the graceful drain on shutdown: handlers in
	// progress get this long to finish with a live context. When it
	// passes, their contexts are cancelled and Run returns
	// ErrCloseTimeout. Default 30s.
	CloseTimeout time.Duration
	// RedeliveryDelay is how long a message whose handler failed waits
	// before it is redelivered (Message.NackAfter), so that a failing
	// message does not loop hot. It gets the failed message (Attempt tells
	// how often it was delivered) and the error. Default:
	// ExponentialRedelivery(1s, 1m). Use NoRedeliveryDelay for an
	// immediate Nack.
	RedeliveryDelay func(msg *relay.Message, err error) time.Duration
	// Logger receives handler errors and lifecycle events. Default
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.RedeliveryDelay == nil {
		c.RedeliveryDelay = ExponentialRedelivery(DefaultRedeliveryInitial, DefaultRedeliveryMax)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.CloseTimeout < 0 {
		errs = append(errs, fmt.Errorf("router: CloseTimeout %v is negative", c.CloseTimeout))
	}
	return errors.Join(errs...)
}

// ExponentialRedelivery returns a RedeliveryDelay of initial on the first
// delivery, doubling with every further delivery up to max.
func ExponentialRedelivery(initial, max time.Duration) func(*relay.Message, error) time.Duration {
	return func(m *relay.Message, _ error) time.Duration {
		d := initial
		for i := 1; i < m.Attempt() && i < redeliveryMaxDoublingAttempt && d < max; i++ {
			d *= 2
		}
		return min(d, max)
	}
}

// NoRedeliveryDelay nacks failed messages for immediate redelivery.
func NoRedeliveryDelay(*relay.Message, error) time.Duration { return 0 }

// Errors returned by the Router.
var (
	// ErrRunning is returned by Run when the router already runs or ran,
	// and by Use, AddHandler and AddBatchHandler after Run started.
	ErrRunning = errors.New("router: already running")
	// ErrClosed is returned by Run after Close; it wraps relay.ErrClosed.
	ErrClosed = fmt.Errorf("router: %w", relay.ErrClosed)
	// ErrCloseTimeout is returned by Run and Close when handlers did not
	// finish within CloseTimeout.
	ErrCloseTimeout = errors.New("router: close timeout: handlers still running")
	// ErrSubscriptionEnded is returned by Run when a subscription's channel
	// closed while the router was running (the subscriber was closed or the
	// backend ended it); the router then shuts down.
	ErrSubscriptionEnded = errors.New("router: subscription ended unexpectedly")
	// ErrNoOutput is the error a message gets when its handler returned
	// messages but has no output to publish them to (it is nacked).
	ErrNoOutput = errors.New("router: handler returned messages but has no output")
)
