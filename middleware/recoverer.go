package middleware

import (
	"context"
	"runtime/debug"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// Recoverer turns a panic in the rest of the chain into a
// *router.PanicError (the panic value and the stack), so that middleware
// outside it (Retry, PoisonQueue, metrics) see an ordinary error. Put it
// innermost. Without it the router still recovers the panic and nacks the
// message, but middleware between it and the panic is skipped.
func Recoverer(next router.Handler) router.Handler {
	return func(ctx context.Context, msg *relay.Message) (outs []*relay.Message, err error) {
		defer func() {
			if v := recover(); v != nil {
				outs, err = nil, &router.PanicError{Value: v, Stack: debug.Stack()}
			}
		}()
		return next(ctx, msg)
	}
}
