package middleware

import (
	"context"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// Timeout gives the rest of the chain a context that is cancelled after d.
// It is cooperative: the handler must watch ctx. Inside Retry it applies to
// each attempt, since every attempt gets a fresh context (the message is
// not modified). d ≤ 0 disables it.
func Timeout(d time.Duration) router.Middleware {
	return func(next router.Handler) router.Handler {
		if d <= 0 {
			return next
		}
		return func(ctx context.Context, msg *relay.Message) ([]*relay.Message, error) {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			return next(ctx, msg)
		}
	}
}
