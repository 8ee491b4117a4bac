package urlopt

import (
	"context"
	"fmt"
	"net/url"

	"github.com/go-relay/relay"
)

// Opener is a relay.Opener and relay.URLChecker made of an adapter's URL
// parser and constructors, for adapters whose one URL serves both sides
// (every query parameter of either side is read, and checked, by both).
// Register it for the adapter's scheme:
//
//	relay.Register("x", urlopt.Opener[config]{Parse: parseURL, Publisher: ..., Subscriber: ...})
type Opener[C any] struct {
	// Parse reads u (with New) into C and returns Params.Err;
	// subscriber adds what only a subscriber needs, such as a group. It
	// touches no network.
	Parse func(u *url.URL, subscriber bool) (C, error)
	// Publisher and Subscriber open a side from what Parse read; ctx
	// bounds connecting.
	Publisher  func(ctx context.Context, c C) (relay.Publisher, error)
	Subscriber func(ctx context.Context, c C) (relay.Subscriber, error)
}

// CheckURL implements relay.URLChecker.
func (o Opener[C]) CheckURL(u *url.URL) error {
	_, err := o.Parse(u, false)
	return err
}

// CheckSubscriberURL implements relay.URLChecker.
func (o Opener[C]) CheckSubscriberURL(u *url.URL) error {
	_, err := o.Parse(u, true)
	return err
}

// OpenPublisher implements relay.Opener: Parse's errors as they are, the
// constructor's after the redacted URL.
func (o Opener[C]) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	c, err := o.Parse(u, false)
	if err != nil {
		return nil, err
	}
	p, err := o.Publisher(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", relay.Redact(u.String()), err)
	}
	return p, nil
}

// OpenSubscriber implements relay.Opener, as OpenPublisher does.
func (o Opener[C]) OpenSubscriber(ctx context.Context, u *url.URL) (relay.Subscriber, error) {
	c, err := o.Parse(u, true)
	if err != nil {
		return nil, err
	}
	s, err := o.Subscriber(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", relay.Redact(u.String()), err)
	}
	return s, nil
}
