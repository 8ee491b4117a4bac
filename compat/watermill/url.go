package watermill

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// SchemePrefix starts the URL scheme of every Watermill Pub/Sub
// registered with Register: watermill+NAME://.
const SchemePrefix = "watermill+"

// Opener makes a Watermill Pub/Sub reachable by relay URL
// (relay.OpenPublisher, relay.OpenSubscriber, the bridge config, the
// CLI); see Register.
type Opener struct {
	// NewPublisher opens the Watermill publisher for u (the whole URL,
	// scheme watermill+NAME). Required for OpenPublisher. ctx bounds
	// connecting only.
	NewPublisher func(ctx context.Context, u *url.URL) (message.Publisher, error)
	// NewSubscriber opens the Watermill subscriber for u and group (the
	// group= parameter, "" when absent): the factory configures the
	// Watermill Pub/Sub's own notion of a group from it (consumer group,
	// queue name). Required for OpenSubscriber.
	NewSubscriber func(ctx context.Context, u *url.URL, group string) (message.Subscriber, error)
	// Params are the query parameters the factories read. The URL may
	// also hold group=, inflight= and inflight_bytes= (relay's
	// subscription window; both sides accept them and the publisher
	// ignores them); any other parameter is an error naming it.
	Params []string
	// RequireGroup makes a subscriber URL without group= an error.
	RequireGroup bool
	// Config declares the Pub/Sub's capabilities and tunes the shared
	// layer, as for NewBackendPublisher and NewBackendSubscriber; the
	// URL's inflight= and inflight_bytes= override
	// Config.Subscription.InFlight and InFlightBytes. Capabilities.Backend
	// defaults to the scheme.
	Config BackendConfig
}

// Register makes the Watermill Pub/Sub o reachable under the URL scheme
// watermill+NAME://, from any code that calls relay.OpenPublisher or
// relay.OpenSubscriber (the bridge and the CLI too, when the program that
// runs them calls Register first, typically from an init func). name is
// lower-case letters, digits, '-' and '.', starting with a letter. Like
// relay.Register, it panics when name is invalid, registered twice, or
// o has neither factory. Safe for concurrent use.
func Register(name string, o Opener) {
	if !validName(name) {
		panic(fmt.Sprintf("relay/watermill: Register: invalid name %q (want lower-case letters, digits, '-' and '.', starting with a letter)", name))
	}
	if o.NewPublisher == nil && o.NewSubscriber == nil {
		panic("relay/watermill: Register " + name + ": Opener has neither NewPublisher nor NewSubscriber")
	}
	scheme := SchemePrefix + name
	if o.Config.Capabilities.Backend == "" {
		o.Config.Capabilities.Backend = scheme
	}
	relay.Register(scheme, &opener{o: o, scheme: scheme})
}

func validName(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

type opener struct {
	o      Opener
	scheme string
}

var (
	_ relay.Opener     = (*opener)(nil)
	_ relay.URLChecker = (*opener)(nil)
)

// params is what relay itself reads from a watermill+NAME URL.
type params struct {
	group         string
	inflight      int
	inflightBytes int64
}

func (op *opener) parse(u *url.URL, subscriber bool) (params, error) {
	var p params
	var errs []error
	bad := func(name, reason string) {
		errs = append(errs, &relay.URLError{URL: relay.Redact(u.String()), Param: name, Reason: reason})
	}
	known := map[string]bool{"group": true, "inflight": true, "inflight_bytes": true}
	for _, k := range op.o.Params {
		known[k] = true
	}
	q := u.Query()
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !known[k] {
			accepted := make([]string, 0, len(known))
			for n := range known {
				accepted = append(accepted, n)
			}
			sort.Strings(accepted)
			bad(k, "unknown parameter (accepted: "+strings.Join(accepted, ", ")+")")
			continue
		}
		if len(q[k]) > 1 {
			bad(k, "given more than once")
		}
	}
	p.group = q.Get("group")
	if v := q.Get("inflight"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			bad("inflight", fmt.Sprintf("%q is not a positive integer", v))
		}
		p.inflight = n
	}
	if v := q.Get("inflight_bytes"); v != "" {
		n, err := driver.ParseBytes(v)
		if err != nil {
			bad("inflight_bytes", err.Error())
		}
		p.inflightBytes = n
	}
	if subscriber {
		if op.o.NewSubscriber == nil {
			errs = append(errs, &relay.URLError{URL: relay.Redact(u.String()), Reason: op.scheme + " was registered without NewSubscriber: it can only publish"})
		}
		if op.o.RequireGroup && p.group == "" {
			bad("group", "required: name the subscriber's group with group=NAME")
		}
	} else if op.o.NewPublisher == nil {
		errs = append(errs, &relay.URLError{URL: relay.Redact(u.String()), Reason: op.scheme + " was registered without NewPublisher: it can only subscribe"})
	}
	return p, errors.Join(errs...)
}

func (op *opener) CheckURL(u *url.URL) error {
	_, err := op.parse(u, false)
	return err
}

func (op *opener) CheckSubscriberURL(u *url.URL) error {
	_, err := op.parse(u, true)
	return err
}

func (op *opener) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	if _, err := op.parse(u, false); err != nil {
		return nil, err
	}
	p, err := op.o.NewPublisher(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("relay/watermill: opening the %s publisher: %w", op.scheme, err)
	}
	return NewBackendPublisher(p, op.o.Config), nil
}

func (op *opener) OpenSubscriber(ctx context.Context, u *url.URL) (relay.Subscriber, error) {
	p, err := op.parse(u, true)
	if err != nil {
		return nil, err
	}
	s, err := op.o.NewSubscriber(ctx, u, p.group)
	if err != nil {
		return nil, fmt.Errorf("relay/watermill: opening the %s subscriber: %w", op.scheme, err)
	}
	c := op.o.Config
	if p.inflight > 0 {
		c.Subscription.InFlight = p.inflight
	}
	if p.inflightBytes > 0 {
		c.Subscription.InFlightBytes = p.inflightBytes
	}
	return NewBackendSubscriber(s, c), nil
}
