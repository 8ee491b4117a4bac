package reqreply

import (
	"context"
	"fmt"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// Func answers one request: it returns the reply, or an error that the
// requester receives as a *RemoteError. A nil reply with a nil error
// answers with an empty message. The reply's Key, Metadata and Payload are
// published; its ID is not (see Handler).
type Func func(ctx context.Context, req *relay.Message) (*relay.Message, error)

// Handler returns a router.Handler that serves requests with fn and
// publishes each answer with pub to the request's ReplyToKey, with the
// request's CorrelationIDKey copied onto it. An error returned by fn is
// answered (a reply with ErrorKey set to the error's text, no payload), not
// retried: the request is acked. A failure to publish the reply is
// returned to the router, which nacks the request for redelivery, so fn
// may run twice for one request (at least once). A request without
// ReplyToKey fails with ErrNoReplyTo without calling fn (put a PoisonQueue
// middleware in front to set it aside). A request whose DeadlineKey has
// passed is acked without calling fn, and a reply that cannot be published
// after the deadline is dropped (the request is acked, not redelivered).
// Every reply is published under a new message ID, whatever ID fn's reply
// has, so that a reply message returned for several requests is not
// dropped as a repeat by a broker that deduplicates by ID (NATS
// JetStream). The handler returns no messages for the router's outputs.
// Safe for concurrent use if fn is.
func Handler(pub relay.Publisher, fn Func) router.Handler {
	return func(ctx context.Context, req *relay.Message) ([]*relay.Message, error) {
		replyTo := req.Metadata.Get(ReplyToKey)
		if replyTo == "" {
			return nil, fmt.Errorf("relay/reqreply: request %s: %w", req.ID, ErrNoReplyTo)
		}
		deadline, hasDeadline := requestDeadline(req)
		if hasDeadline && !time.Now().Before(deadline) {
			return nil, nil // its requester gave up: nobody waits for the answer
		}
		rep, err := fn(ctx, req)
		out := &relay.Message{ID: relay.NewID()}
		switch {
		case err != nil:
			text := err.Error()
			if text == "" {
				text = "error"
			}
			out.Metadata = relay.Metadata{ErrorKey: text}
		case rep != nil:
			out.Key, out.Payload, out.Metadata = rep.Key, rep.Payload, rep.Metadata.Clone()
			delete(out.Metadata, ErrorKey)
			delete(out.Metadata, ReplyToKey)
		}
		if out.Metadata == nil {
			out.Metadata = relay.Metadata{}
		}
		if corr := req.Metadata.Get(CorrelationIDKey); corr != "" {
			out.Metadata[CorrelationIDKey] = corr
		}
		if err := pub.Publish(ctx, replyTo, out); err != nil {
			if hasDeadline && !time.Now().Before(deadline) {
				return nil, nil // too late to matter: do not redeliver the request
			}
			return nil, fmt.Errorf("relay/reqreply: publishing the reply to request %s to %q: %w", req.ID, replyTo, err)
		}
		return nil, nil
	}
}

// requestDeadline parses the request's DeadlineKey; an absent or malformed
// one means no deadline.
func requestDeadline(req *relay.Message) (time.Time, bool) {
	v := req.Metadata.Get(DeadlineKey)
	if v == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}
