package driver

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-relay/relay"
)

// Opener is an adapter's relay.Opener, relay.URLChecker and
// relay.URLDefaulter, built from its URL parser and constructors: register
// a pointer to it with relay.Register for the adapter's schemes. C is everything a URL configures, for both sides (one
// URL serves a publisher and a subscriber, each ignoring the other's
// parameters after checking them).
//
// It parses the URL with Parse (whose errors it returns as they are), and
// for an Open call connects with Connect when set, builds the publisher
// or subscriber, and closes the connection with Disconnect when that
// fails. Errors after Parse name the backend and the URL with its
// password redacted: "relay/<Backend>: <URL>: <error>", unless the error
// already begins with "relay/<Backend>: " (a constructor that names its
// broker itself).
type Opener[C any] struct {
	// Backend names the adapter in errors: "redis", "nats".
	Backend string
	// Parse reads u for a publisher, or with subscriber for a subscriber
	// (which adds what only a subscriber needs, such as a group). It
	// touches no network and reports every problem as a *relay.URLError
	// naming its parameter where there is one (joined when several).
	Parse func(u *url.URL, subscriber bool) (C, error)
	// Connect, when set, connects within ctx and keeps the connection in
	// *c for the constructor.
	Connect func(ctx context.Context, c *C) error
	// Disconnect, when set, closes what Connect opened; called when the
	// constructor fails.
	Disconnect func(c C)
	// NewPublisher and NewSubscriber build the publisher or subscriber of
	// a parsed (and connected) c; ctx bounds connecting only.
	NewPublisher  func(ctx context.Context, c C) (relay.Publisher, error)
	NewSubscriber func(ctx context.Context, c C) (relay.Subscriber, error)
	// Defaults, when set, is what the adapter declares for tools that
	// build its URLs (see relay.URLDefaulter).
	Defaults relay.URLDefaults
}

// Register registers o with relay.Register for each of schemes; adapters
// call it from init.
func (o *Opener[C]) Register(schemes ...string) {
	for _, s := range schemes {
		relay.Register(s, o)
	}
}

// CheckURL implements relay.URLChecker.
func (o *Opener[C]) CheckURL(u *url.URL) error {
	_, err := o.Parse(u, false)
	return err
}

// CheckSubscriberURL implements relay.URLChecker.
func (o *Opener[C]) CheckSubscriberURL(u *url.URL) error {
	_, err := o.Parse(u, true)
	return err
}

// URLDefaults implements relay.URLDefaulter.
func (o *Opener[C]) URLDefaults() relay.URLDefaults { return o.Defaults }

// OpenPublisher implements relay.Opener.
func (o *Opener[C]) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	return open(o, ctx, u, false, o.NewPublisher)
}

// OpenSubscriber implements relay.Opener.
func (o *Opener[C]) OpenSubscriber(ctx context.Context, u *url.URL) (relay.Subscriber, error) {
	return open(o, ctx, u, true, o.NewSubscriber)
}

// open is OpenPublisher and OpenSubscriber: T is the side's interface.
func open[C any, T any](o *Opener[C], ctx context.Context, u *url.URL, subscriber bool, build func(context.Context, C) (T, error)) (T, error) {
	var zero T
	c, err := o.Parse(u, subscriber)
	if err != nil {
		return zero, err
	}
	if o.Connect != nil {
		if err := o.Connect(ctx, &c); err != nil {
			return zero, o.wrap(u, err)
		}
	}
	v, err := build(ctx, c)
	if err != nil {
		if o.Disconnect != nil {
			o.Disconnect(c)
		}
		// Not v: a nil pointer in the interface would not be nil.
		return zero, o.wrap(u, err)
	}
	return v, nil
}

func (o *Opener[C]) wrap(u *url.URL, err error) error {
	prefix := "relay/" + o.Backend + ": "
	if strings.HasPrefix(err.Error(), prefix) {
		return err
	}
	return fmt.Errorf("%s%s: %w", prefix, relay.Redact(u.String()), err)
}

// DefaultSourceWindow is the window (inflight=) that the adapters of this
// module declare for a bridge route's source (relay.URLDefaults) unless
// their broker wants another: forwarding is bound by the window divided
// by the latency of a consume and a publish, so a route wants a larger
// window than an application.
const DefaultSourceWindow = 1024
