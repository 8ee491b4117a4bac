package memory

import (
	"context"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// NewSubscriber returns a subscriber of the in-process broker name for cfg.Group.
func NewSubscriber(name string, cfg SubscriberConfig) (relay.Subscriber, error) {
	if cfg.Group == "" {
		return nil, &relay.URLError{URL: "mem://" + name, Param: "group", Reason: "required"}
	}
	d := &subDriver{b: brokerNamed(name), group: cfg.Group, caps: capabilities(DefaultMaxBytes)}
	return driver.NewSubscriber(d, driver.Options{InFlight: cfg.InFlight, InFlightBytes: cfg.InFlightBytes, Group: cfg.Group}), nil
}

type subDriver struct {
	b     *broker
	group string
	caps  relay.Capabilities
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }
func (d *subDriver) Close() error                     { return nil }

func (d *subDriver) Provision(_ context.Context, topic string) error {
	d.b.groupFor(topic, d.group)
	return nil
}

func (d *subDriver) Subscribe(_ context.Context, topic string) (driver.Receiver, error) {
	return &receiver{b: d.b, g: d.b.groupFor(topic, d.group)}, nil
}

// RemoveTopic forgets topic in the broker: every group and message of it.
// Idempotent.
func (d *subDriver) RemoveTopic(_ context.Context, topic string) error {
	d.b.remove(topic)
	return nil
}
