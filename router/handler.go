package router

import (
	"context"
	"fmt"

	"github.com/go-relay/relay"
)

// Handler processes one delivered message and returns the messages to
// publish to the handler's outputs, or an error.
//
// The router publishes the returned messages to every output (see Output)
// before it acks msg; on error it nacks msg with a redelivery delay. A
// handler does not settle msg itself (if it does, the router respects that
// and only publishes the outputs). ctx is owned by the router: it stays live
// while the router drains on shutdown and is cancelled only when the drain
// times out. It carries the handler's name and topic (HandlerName, Topic).
type Handler func(ctx context.Context, msg *relay.Message) ([]*relay.Message, error)

// Middleware wraps a Handler.
//
// Order: for router.Use(a, b) and then WithMiddleware(c) on a handler, a
// message flows a → b → c → handler and the result flows back
// handler → c → b → a. The first middleware is the outermost: it runs first
// and sees the final result last. Chain(a, b)(h) == a(b(h)).
type Middleware func(Handler) Handler

// Chain composes middleware so that the first is the outermost:
// Chain(a, b, c)(h) == a(b(c(h))).
func Chain(mw ...Middleware) Middleware {
	return func(h Handler) Handler {
		for i := len(mw) - 1; i >= 0; i-- {
			if mw[i] != nil {
				h = mw[i](h)
			}
		}
		return h
	}
}

// PanicError is what a recovered panic becomes (router and
// middleware.Recoverer). Value is what was passed to panic; Stack is the
// goroutine's stack at the panic.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns Value when it is an error, so errors.Is sees through a
// panic(err).
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

type infoKey struct{}

// handlerInfo is stored once per handler in the context given to its
// messages, so that middleware can name what they are running in.
type handlerInfo struct {
	name     string
	topic    string
	group    string
	stopping <-chan struct{}
}

// HandlerName returns the name of the router handler running ctx, or "".
func HandlerName(ctx context.Context) string {
	if hi, ok := ctx.Value(infoKey{}).(*handlerInfo); ok {
		return hi.name
	}
	return ""
}

// Group returns the group of the subscriber of the router handler running
// ctx, as the subscriber names it (relay.GroupNamer), or "" when it does
// not (or outside a router).
func Group(ctx context.Context) string {
	if hi, ok := ctx.Value(infoKey{}).(*handlerInfo); ok {
		return hi.group
	}
	return ""
}

// Topic returns the topic the router handler running ctx subscribes to, or "".
func Topic(ctx context.Context) string {
	if hi, ok := ctx.Value(infoKey{}).(*handlerInfo); ok {
		return hi.topic
	}
	return ""
}

// Stopping returns a channel that is closed when the router running ctx
// begins to shut down: the handler in progress may finish, but anything
// that waits (such as a retry backoff) should give up and return its error
// so that the message is nacked and redelivered. Outside a router it
// returns nil (a channel that never fires).
func Stopping(ctx context.Context) <-chan struct{} {
	if hi, ok := ctx.Value(infoKey{}).(*handlerInfo); ok {
		return hi.stopping
	}
	return nil
}

// WithHandlerInfo returns a context that carries a handler name and topic as
// the router sets them, for running a Handler outside a router (tests,
// custom runners).
func WithHandlerInfo(ctx context.Context, name, topic string) context.Context {
	return context.WithValue(ctx, infoKey{}, &handlerInfo{name: name, topic: topic})
}
