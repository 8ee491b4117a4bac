package memory

import (
	"context"
	"net/url"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/urlopt"
)

func init() { opener.Register(Scheme) }

// opener opens mem://NAME?... : NAME is the in-process broker.
var opener = driver.Opener[urlConfig]{
	Backend: "memory",
	Parse:   parseURL,
	NewPublisher: func(_ context.Context, c urlConfig) (relay.Publisher, error) {
		return NewPublisher(c.broker, c.pub), nil
	},
	NewSubscriber: func(_ context.Context, c urlConfig) (relay.Subscriber, error) {
		return NewSubscriber(c.broker, c.sub)
	},
	Defaults: relay.URLDefaults{SourceWindow: driver.DefaultSourceWindow, EitherSide: true, InProcess: true},
}

// urlConfig is everything a mem:// URL configures, for both sides.
type urlConfig struct {
	broker string
	pub    PublisherConfig
	sub    SubscriberConfig
}

// parseURL reads the parameters of both sides, so that one URL serves a
// publisher and a subscriber: each side ignores the other's parameters,
// whose values are still checked. subscriber adds the group requirement.
func parseURL(u *url.URL, subscriber bool) (urlConfig, error) {
	p := urlopt.New(u)
	c := urlConfig{broker: brokerName(u), pub: PublisherConfig{MaxBytes: p.Size("max_bytes", DefaultMaxBytes, 1)}}
	c.sub = SubscriberConfig{
		Group:         p.Group(subscriber),
		InFlight:      p.Int("inflight", 64, 1),
		InFlightBytes: p.Bytes("inflight_bytes", 0),
	}
	return c, p.Err()
}

func brokerName(u *url.URL) string {
	if u.Host != "" {
		return u.Host
	}
	if u.Opaque != "" {
		return u.Opaque
	}
	return "default"
}
