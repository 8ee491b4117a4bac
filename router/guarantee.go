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

// checkGuarantee refuses a guarantee the handler cannot give: exactly-once
// needs sub to be a relay.ExactlyOnceSubscriber paired with every output's
// publisher (see WithGuarantee); batch handlers (outs nil, batch true)
// never give it.
func checkGuarantee(name string, g relay.Guarantee, sub relay.Subscriber, outs []Output, batch bool) error {
	switch g {
	case relay.AtLeastOnce, relay.AtMostOnce:
		return nil
	case relay.ExactlyOnce:
		reason := exactlyOnceProblem(sub, outs, batch)
		if reason == "" {
			return nil
		}
		return &GuaranteeError{Handler: name, Want: g,
			Available: []relay.Guarantee{relay.AtMostOnce, relay.AtLeastOnce},
			Reason: reason + "; exactly-once needs the input's offsets and the outputs committed in one broker " +
				"transaction: a Kafka subscriber and publisher opened together (kafka.NewExactlyOnce, " +
				"relay.OpenExactlyOnce) with every output on that publisher, or at-least-once with middleware.Dedup " +
				"for an exactly-once effect"}
	}
	return fmt.Errorf("router: handler %q: unknown %v", name, g)
}

// exactlyOnceProblem says why sub and outs cannot give exactly-once, or "".
func exactlyOnceProblem(sub relay.Subscriber, outs []Output, batch bool) string {
	if batch {
		return "batch handlers do not offer it (the router publishes no outputs for them)"
	}
	eo, ok := sub.(relay.ExactlyOnceSubscriber)
	if !ok {
		return fmt.Sprintf("the subscriber (%T) has no transactions spanning its acks and a publisher's outputs", sub)
	}
	if len(outs) == 0 {
		return "the handler has no outputs: exactly-once covers the messages the router publishes to outputs " +
			"(WithOutput) with the subscriber's paired publisher"
	}
	for i, o := range outs {
		if o.Publisher == nil || !eo.ExactlyOnceWith(o.Publisher) {
			return fmt.Sprintf("output %d (topic %q) publishes with a publisher that is not paired with the subscriber", i, o.Topic)
		}
	}
	return ""
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
