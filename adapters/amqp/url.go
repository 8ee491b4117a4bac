package amqp

import (
	"context"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Schemes registered by this package.
const (
	Scheme    = "amqp"
	SchemeTLS = "amqps"
)

func init() { opener.Register(Scheme, SchemeTLS) }

// opener opens amqp://user:pass@host:5672/vhost?... and amqps:// (see
// docs/amqp.md).
var opener = driver.Opener[Config]{
	Backend: "amqp",
	Parse:   parseAndCheck,
	NewPublisher: func(ctx context.Context, c Config) (relay.Publisher, error) {
		return NewPublisher(ctx, c)
	},
	NewSubscriber: func(ctx context.Context, c Config) (relay.Subscriber, error) {
		return NewSubscriber(ctx, c)
	},
	// RabbitMQ pushes up to the prefetch count of messages whatever their
	// size (it has no prefetch in bytes), so a bridge's window bounds
	// memory by count alone here: smaller than on the other brokers.
	Defaults: relay.URLDefaults{SourceWindow: 256, EitherSide: true},
}
