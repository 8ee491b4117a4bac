package reqreply

import (
	"context"
	"errors"

	"github.com/go-relay/relay"
)

// Metadata keys of the wire format. ReplyToKey and CorrelationIDKey are
// package relay's names, which adapters map to native fields where the
// broker has them (see relay.MetaReplyTo); the others are plain metadata
// everywhere.
const (
	// ReplyToKey, on a request, is where the reply goes: the requester's
	// reply topic, or the broker's reply address.
	ReplyToKey = relay.MetaReplyTo
	// CorrelationIDKey is set on a request by the Requester (a fresh UUIDv7
	// per call) and copied onto the reply by the server.
	CorrelationIDKey = relay.MetaCorrelationID
	// ErrorKey, on a reply, marks it as an error: its value is the server's
	// error text, and Request returns it as a *RemoteError.
	ErrorKey = "reply-error"
	// DeadlineKey, on a request, is when its requester stops waiting
	// (RFC 3339 with nanoseconds, UTC). A Handler skips a request that
	// arrives after it and drops a reply it cannot publish after it. Peers
	// compare it with their own clocks: keep them synchronised.
	DeadlineKey = "request-deadline"
)

// RemoteError is what Request returns when the server's handler failed:
// the reply carried ErrorKey.
type RemoteError struct {
	// Message is the server's error text (ErrorKey's value).
	Message string
	// Reply is the error reply as received (its payload is what the server
	// put there, usually empty).
	Reply *relay.Message
}

func (e *RemoteError) Error() string { return "relay/reqreply: remote error: " + e.Message }

// ErrNoReplyTo is returned by a Handler for a request without ReplyToKey:
// there is nowhere to send the answer.
var ErrNoReplyTo = errors.New("relay/reqreply: request has no " + ReplyToKey)

// DirectReplier is implemented by publishers whose broker has a native
// reply channel (amqp.Publisher: RabbitMQ direct reply-to). NewRequester
// uses it instead of a reply topic.
//
// DirectReply opens the channel within ctx and returns a Publisher that
// publishes requests on it: Publish sets ReplyToKey of every message to the
// channel's reply address, whatever the message says. Every message that
// arrives at the address is passed to deliver, from one goroutine, in
// arrival order; deliver must not block for long. Closing the returned
// Publisher ends the channel, and deliver is not called once Close has
// returned.
type DirectReplier interface {
	DirectReply(ctx context.Context, deliver func(*relay.Message)) (relay.Publisher, error)
}

// TopicRemover is implemented by subscribers that can remove a topic and
// the subscriber's group state for it from the broker (the stream, queue,
// topic or rows). The Requester calls it on Close for its reply topic.
// RemoveTopic is idempotent: removing a topic that does not exist is not
// an error; relay.ErrNotSupported means the backend keeps it. It must not
// be called while a subscription to topic is active. Every subscriber of
// this module's adapters implements it (driver.Subscriber.RemoveTopic).
type TopicRemover interface {
	RemoveTopic(ctx context.Context, topic string) error
}
