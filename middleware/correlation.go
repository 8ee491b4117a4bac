package middleware

import (
	"context"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// CorrelationIDKey is the metadata key that carries the correlation ID.
const CorrelationIDKey = "correlation_id"

type correlationKey struct{}

// CorrelationID propagates a correlation ID from a handled message to the
// messages it produces. The ID is the message's CorrelationIDKey metadata,
// or its ID when it has none (the message starts a new chain). It is put in
// the handler's context (CorrelationIDFrom) and set on every returned
// message that does not have one already.
func CorrelationID(next router.Handler) router.Handler {
	return func(ctx context.Context, msg *relay.Message) ([]*relay.Message, error) {
		id := msg.Metadata.Get(CorrelationIDKey)
		if id == "" {
			id = msg.ID
		}
		ctx = context.WithValue(ctx, correlationKey{}, id)
		outs, err := next(ctx, msg)
		for _, o := range outs {
			if o != nil { // the router refuses a nil output, naming it
				SetCorrelationID(o, id)
			}
		}
		return outs, err
	}
}

// CorrelationIDFrom returns the correlation ID CorrelationID put in ctx, or "".
func CorrelationIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}

// SetCorrelationID sets id on msg unless msg already has one or id is "".
// Use it on messages published outside a router, from CorrelationIDFrom.
func SetCorrelationID(msg *relay.Message, id string) {
	if id == "" || msg == nil || msg.Metadata.Get(CorrelationIDKey) != "" {
		return
	}
	if msg.Metadata == nil {
		msg.Metadata = relay.Metadata{}
	}
	msg.Metadata[CorrelationIDKey] = id
}
