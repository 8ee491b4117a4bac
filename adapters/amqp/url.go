package amqp

import (
	"context"
	"net/url"

	"github.com/go-relay/relay"
)

// Schemes registered by this package.
const (
	Scheme    = "amqp"
	SchemeTLS = "amqps"
)

func init() {
	relay.Register(Scheme, opener{})
	relay.Register(SchemeTLS, opener{})
}

type opener struct{}

// CheckURL implements relay.URLChecker.
func (opener) CheckURL(u *url.URL) error {
	_, err := parseAndCheck(u, false)
	return err
}

// CheckSubscriberURL implements relay.URLChecker.
func (opener) CheckSubscriberURL(u *url.URL) error {
	_, err := parseAndCheck(u, true)
	return err
}

func (opener) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	cfg, err := parseAndCheck(u, false)
	if err != nil {
		return nil, err
	}
	// Not returned directly: a nil *Publisher in a relay.Publisher would be a
	// non-nil interface next to the error.
	v, err := NewPublisher(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (opener) OpenSubscriber(ctx context.Context, u *url.URL) (relay.Subscriber, error) {
	cfg, err := parseAndCheck(u, true)
	if err != nil {
		return nil, err
	}
	// Not returned directly: a nil *Subscriber in a relay.Subscriber would be a
	// non-nil interface next to the error.
	v, err := NewSubscriber(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return v, nil
}
