package router

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"

	"github.com/go-relay/relay"
)

// ErrRetriedAtMostOnce is (wrapped in relay.Permanent) the error of a second call of an at-most-once
// handler for the same message (by middleware that retries without being
// marked with Retrying): the handler is not run again.
var ErrRetriedAtMostOnce = errors.New("router: an at-most-once handler is not run twice for one message")

// GuaranteeError is returned by AddHandler and AddBatchHandler for a
// guarantee the handler cannot give. Available lists the guarantees it can
// give; Reason says why Want is not among them.
type GuaranteeError struct {
	Handler   string
	Want      relay.Guarantee
	Available []relay.Guarantee
	Reason    string
}

func (e *GuaranteeError) Error() string {
	return fmt.Sprintf("router: handler %q: %s is not available (this handler can give %v): %s",
		e.Handler, e.Want, e.Available, e.Reason)
}

// checkGuarantee refuses a guarantee the router does not give.
func checkGuarantee(name string, g relay.Guarantee) error {
	switch g {
	case relay.AtLeastOnce, relay.AtMostOnce:
		return nil
	case relay.ExactlyOnce:
		return &GuaranteeError{Handler: name, Want: g,
			Available: []relay.Guarantee{relay.AtMostOnce, relay.AtLeastOnce},
			Reason: "exactly-once needs the input's offsets and the outputs committed in one broker transaction " +
				"(Kafka transactions), which relay does not implement yet; use at-least-once with middleware.Dedup " +
				"for an exactly-once effect"}
	}
	return fmt.Errorf("router: handler %q: unknown %v", name, g)
}

// Retrying marks mw as middleware that runs the rest of the chain more
// than once for one delivery (in-process retries), so that AddHandler and
// Use refuse it on an at-most-once handler, where a retry would contradict
// the guarantee. middleware.Retry returns marked middleware. The marked
// middleware behaves exactly as mw. Only the value Retrying returns is
// recognised: middleware composed with Chain is not, and an at-most-once
// handler then stops a retry at run time (ErrRetriedAtMostOnce).
//
//go:noinline
func Retrying(mw Middleware) Middleware {
	return func(next Handler) Handler { return mw(next) }
}

// retryingPC is the code of the function literal in Retrying: every value
// Retrying returns is a closure of it (Retrying is never inlined, so the
// literal is not copied into its callers).
var retryingPC = reflect.ValueOf(Retrying(nil)).Pointer()

func isRetrying(mw Middleware) bool {
	return mw != nil && reflect.ValueOf(mw).Pointer() == retryingPC
}

// refuseRetrying returns the error for retrying middleware on an
// at-most-once handler, or nil.
func refuseRetrying(name string, mws []Middleware, where string) error {
	for i, mw := range mws {
		if isRetrying(mw) {
			return fmt.Errorf("router: handler %q: %s %d retries (router.Retrying, such as middleware.Retry), "+
				"but the handler is at-most-once: its input is acked before it runs, so a retry would run it again "+
				"for a message already settled; remove the retry middleware or use at-least-once", name, where, i)
		}
	}
	return nil
}

type callsKey struct{}

// onceOnly wraps an at-most-once handler so that a second call for the same
// message (counted in the ctx processAtMostOnce gives) fails without
// running fn.
func onceOnly(name string, fn Handler) Handler {
	return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		if n, ok := ctx.Value(callsKey{}).(*atomic.Int32); ok && n.Add(1) > 1 {
			// Permanent, so that a retry loop gives up at once.
			return nil, relay.Permanent(fmt.Errorf("%w (handler %q, message %s)", ErrRetriedAtMostOnce, name, m.ID))
		}
		return fn(ctx, m)
	}
}
