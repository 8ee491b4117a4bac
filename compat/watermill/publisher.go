package watermill

import (
	"context"
	"fmt"
	"reflect"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/go-relay/relay"
)

// Publisher is a Watermill message.Publisher that publishes through a
// relay.Publisher, so Watermill code (its router, CQRS, middleware) sends
// to any relay backend. Safe for concurrent use.
type Publisher struct {
	p    relay.Publisher
	opts Options
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher wraps p. The Publisher owns p: its Close closes p.
func NewPublisher(p relay.Publisher, opts Options) *Publisher {
	return &Publisher{p: p, opts: opts.withDefaults()}
}

// Relay returns the wrapped relay publisher.
func (p *Publisher) Relay() relay.Publisher { return p.p }

// Publish publishes msgs to topic and returns once relay's Publish
// returned: nil only when the broker accepted every message. Each
// message's UUID becomes the relay ID (a message without one gets a
// UUIDv7, written back into its UUID); its metadata entry named
// Options.KeyMetadata becomes the relay Key.
//
// Watermill's Publish has no ctx: each message's Context() bounds its
// publish instead. Consecutive messages that share one Context are sent
// in one relay Publish call (one broker batch); a message with another
// Context starts a new call. Publishing stops at the first call that
// fails, so the messages after it are not sent, as Watermill's contract
// allows; the error says how many were accepted before it. Publish
// blocks until the broker answered or the messages' context ended. A
// message delivered by a Subscriber carries its delivery's context, done
// once it is settled: publish a copy (message.Copy) of one already acked.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	accepted := 0
	for start := 0; start < len(msgs); {
		ctx := msgs[start].Context()
		end := start + 1
		for end < len(msgs) && sameContext(msgs[end].Context(), ctx) {
			end++
		}
		batch := make([]*relay.Message, end-start)
		for i, wm := range msgs[start:end] {
			batch[i] = toRelay(wm, p.opts.KeyMetadata)
		}
		err := p.p.Publish(ctx, topic, batch...)
		for i, wm := range msgs[start:end] {
			if wm.UUID == "" {
				wm.UUID = batch[i].ID
			}
		}
		if err != nil {
			return fmt.Errorf("relay/watermill: publish to %q (%d of %d messages accepted before this call): %w",
				topic, accepted, len(msgs), err)
		}
		accepted += end - start
		start = end
	}
	return nil
}

// sameContext reports whether a and b are the same context value; a
// context of a type that cannot be compared is never the same.
func sameContext(a, b context.Context) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// Close closes the relay publisher: it waits for Publish calls in
// progress, bounded by relay's close timeout. Idempotent.
func (p *Publisher) Close() error { return p.p.Close() }
