package memory

import (
	"context"
	"net/url"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/urlopt"
)

func init() { relay.Register(Scheme, opener{}) }

type opener struct{}

// parseURL reads the parameters of both sides, so that one URL serves a
// publisher and a subscriber: each side ignores the other's parameters,
// whose values are still checked. subscriber adds the group requirement.
func parseURL(u *url.URL, subscriber bool) (PublisherConfig, SubscriberConfig, error) {
	p := urlopt.New(u)
	pc := PublisherConfig{MaxBytes: p.Size("max_bytes", DefaultMaxBytes, 1)}
	sc := SubscriberConfig{
		Group:         p.String("group", ""),
		InFlight:      p.Int("inflight", 64, 1),
		InFlightBytes: p.Bytes("inflight_bytes", 0),
	}
	if subscriber && sc.Group == "" {
		p.Fail("group", "required: the name of this subscriber's group of competing consumers")
	}
	return pc, sc, p.Err()
}

func (opener) CheckURL(u *url.URL) error {
	_, _, err := parseURL(u, false)
	return err
}

func (opener) CheckSubscriberURL(u *url.URL) error {
	_, _, err := parseURL(u, true)
	return err
}

func (opener) OpenPublisher(_ context.Context, u *url.URL) (relay.Publisher, error) {
	cfg, _, err := parseURL(u, false)
	if err != nil {
		return nil, err
	}
	return NewPublisher(brokerName(u), cfg), nil
}

func (opener) OpenSubscriber(_ context.Context, u *url.URL) (relay.Subscriber, error) {
	_, cfg, err := parseURL(u, true)
	if err != nil {
		return nil, err
	}
	return NewSubscriber(brokerName(u), cfg)
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
