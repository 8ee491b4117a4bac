package cloudevents

import (
	"context"
	"fmt"

	"github.com/go-relay/relay"
)

// Publisher publishes events through a relay.Publisher in the binary
// content mode of that publisher's backend. It is safe for concurrent use
// when the wrapped publisher is (every relay publisher is). It does not
// own the wrapped publisher: close that one yourself.
type Publisher struct {
	pub     relay.Publisher
	binding Binding
}

// NewPublisher wraps pub, with the binding BindingOf(pub) picks from the
// backend pub declares in its Capabilities (Generic when it declares
// none, e.g. a wrapper around an adapter's publisher; use
// NewPublisherWith then).
func NewPublisher(pub relay.Publisher) *Publisher {
	return &Publisher{pub: pub, binding: BindingOf(pub)}
}

// NewPublisherWith wraps pub with binding b.
func NewPublisherWith(pub relay.Publisher, b Binding) *Publisher {
	return &Publisher{pub: pub, binding: b}
}

// Binding is the binding the publisher writes.
func (p *Publisher) Binding() Binding { return p.binding }

// Publish encodes every event (Binding.ToMessage), then publishes them in
// one call with the wrapped publisher's guarantees: nil means every event
// was accepted by the broker. An invalid event fails the call before
// anything is sent (an error matching ErrInvalidEvent). The relay message
// ID of each event is its id, so a *relay.PublishError names events by id.
// Publish blocks as the wrapped Publish does and honours ctx.
func (p *Publisher) Publish(ctx context.Context, topic string, events ...*Event) error {
	return p.publish(ctx, topic, events, p.binding.ToMessage)
}

// PublishStructured is Publish in structured content mode
// (Binding.ToStructuredMessage): the whole event as JSON in the payload.
func (p *Publisher) PublishStructured(ctx context.Context, topic string, events ...*Event) error {
	return p.publish(ctx, topic, events, p.binding.ToStructuredMessage)
}

func (p *Publisher) publish(ctx context.Context, topic string, events []*Event, encode func(*Event) (*relay.Message, error)) error {
	msgs := make([]*relay.Message, len(events))
	for i, e := range events {
		m, err := encode(e)
		if err != nil {
			return fmt.Errorf("%w (event %d of %d)", err, i+1, len(events))
		}
		msgs[i] = m
	}
	return p.pub.Publish(ctx, topic, msgs...)
}
