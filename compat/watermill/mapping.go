package watermill

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/go-relay/relay"
)

// DefaultKeyMetadata is the Watermill metadata key that carries relay's
// Message.Key when KeyMetadata is not set: Watermill messages have no key
// of their own.
const DefaultKeyMetadata = "relay_key"

func keyName(k string) string {
	if k == "" {
		return DefaultKeyMetadata
	}
	return k
}

// toRelay converts a Watermill message into an undelivered relay message:
// UUID becomes ID, the metadata entry named key becomes Key (and is left
// out of Metadata), Payload is shared, not copied.
func toRelay(wm *message.Message, key string) *relay.Message {
	m := &relay.Message{ID: wm.UUID, Payload: wm.Payload}
	if len(wm.Metadata) > 0 {
		md := make(relay.Metadata, len(wm.Metadata))
		for k, v := range wm.Metadata {
			if k == key {
				m.Key = v
				continue
			}
			md[k] = v
		}
		if len(md) > 0 {
			m.Metadata = md
		}
	}
	return m
}

// toWatermill converts a relay message into a new Watermill message: ID
// becomes UUID, a non-empty Key becomes the metadata entry named key,
// Payload is shared, not copied.
func toWatermill(m *relay.Message, key string) *message.Message {
	wm := message.NewMessage(m.ID, m.Payload)
	for k, v := range m.Metadata {
		wm.Metadata[k] = v
	}
	if m.Key != "" {
		wm.Metadata[key] = m.Key
	}
	return wm
}

// ErrNotRelayMessage is returned by NackAfter for a Watermill message that
// was not delivered by a Subscriber of this package.
var ErrNotRelayMessage = errors.New("relay/watermill: not a message delivered by a relay subscriber")

type relayMessageKey struct{}

// RelayMessage returns the relay message behind m, a message delivered by
// a Subscriber of this package, or nil for any other message (one made by
// message.NewMessage, or a copy: message.Copy drops the context, and
// CopyWithContext keeps it, so such a copy still returns the original).
// Through it a Watermill handler reaches what Watermill has no words for:
// Attempt, Topic, Key, NackAfter.
//
// Settling the relay message directly settles the delivery: the
// Subscriber then sends the next message without waiting for the
// Watermill message's Ack or Nack.
func RelayMessage(m *message.Message) *relay.Message {
	if m == nil {
		return nil
	}
	return RelayMessageFromContext(m.Context())
}

// RelayMessageFromContext returns the relay message behind the Watermill
// message whose Context ctx is or derives from (a CQRS handler's ctx, for
// one), or nil when there is none.
func RelayMessageFromContext(ctx context.Context) *relay.Message {
	rm, _ := ctx.Value(relayMessageKey{}).(*relay.Message)
	return rm
}

// Attempt is RelayMessage(m).Attempt(): 1 on the first delivery, counted
// by the relay backend. It is 0 for a message not delivered by a
// Subscriber of this package.
func Attempt(m *message.Message) int {
	if rm := RelayMessage(m); rm != nil {
		return rm.Attempt()
	}
	return 0
}

// NackAfter settles m, a message delivered by a Subscriber of this
// package, for redelivery after at least delay (relay's
// Message.NackAfter, native on backends that declare NativeDelay), then
// Nacks the Watermill message so that Watermill code sees it nacked. It
// returns ErrNotRelayMessage for any other message, and relay's
// settlement errors (ErrAlreadySettled, ErrSubscriptionEnded) as they are.
// Safe from any goroutine; does not block on the broker.
func NackAfter(m *message.Message, delay time.Duration) error {
	rm := RelayMessage(m)
	if rm == nil {
		return ErrNotRelayMessage
	}
	err := rm.NackAfter(delay)
	if err == nil {
		m.Nack()
	}
	return err
}

// withRelay is the context a delivered Watermill message carries: the
// relay message's context (done once it is settled or its subscription
// ended, derived from the Subscribe ctx) with the relay message as a
// value.
func withRelay(m *relay.Message) context.Context {
	return context.WithValue(m.Context(), relayMessageKey{}, m)
}
