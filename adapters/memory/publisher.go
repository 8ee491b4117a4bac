package memory

import (
	"context"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

func capabilities(maxBytes int) relay.Capabilities {
	return relay.Capabilities{
		Backend:              "memory",
		Durable:              false,
		CrossProcess:         false,
		Ordering:             relay.OrderPerTopic,
		NativeDelay:          true,
		DelayedDelivery:      relay.DelayNative,
		AttemptFromBroker:    true,
		MaxMessageBytes:      maxBytes,
		MaxMessageBytesSetBy: "max_bytes=",
		RetainedBeforeGroup:  "kept for the first group (newest 10,000 / 64 MiB)",

		// Acks are per message: an acked message is never delivered again.
		AckedAfterUnsettledRedelivered: false,
	}
}

// NewPublisher returns a publisher to the in-process broker name.
func NewPublisher(name string, cfg PublisherConfig) relay.Publisher {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	return driver.NewPublisher(&pubDriver{b: brokerNamed(name), caps: capabilities(cfg.MaxBytes)}, 0)
}

type pubDriver struct {
	b    *broker
	caps relay.Capabilities
}

func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.b.publish(topic, msgs)
	return nil
}
func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

// CheckGroups implements driver.GroupCheckDriver: always nil, because
// the broker keeps the newest messages of a topic for its first group
// (see Capabilities.RetainedBeforeGroup), so a message published before
// any group exists is kept for one created later.
func (d *pubDriver) CheckGroups(context.Context, string) error { return nil }

func (d *pubDriver) Close() error { return nil }
