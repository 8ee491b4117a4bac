package gcppubsub

import (
	"context"
	"net/url"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/urlopt"
)

// Scheme of this backend.
const Scheme = "gcppubsub"

func init() { opener.Register(Scheme) }

// opener opens gcppubsub://PROJECT?... (see docs/gcppubsub.md).
var opener = driver.Opener[Config]{
	Backend:       "gcppubsub",
	Parse:         parseURL,
	NewPublisher:  NewPublisher,
	NewSubscriber: NewSubscriber,
	Defaults:      relay.URLDefaults{SourceWindow: driver.DefaultSourceWindow, EitherSide: true},
}

// parseURL reads the project and the parameters of both sides, so that
// one URL serves a publisher and a subscriber; each side ignores the
// other's parameters, whose values are still checked. subscriber adds the
// subscriber's own requirement, a group. Every problem is a
// *relay.URLError (joined).
func parseURL(u *url.URL, subscriber bool) (Config, error) {
	p := urlopt.New(u)
	c := Config{
		Project:             u.Hostname(),
		Group:               p.String("group", ""),
		Endpoint:            p.String("endpoint", ""),
		Emulator:            p.String("emulator", ""),
		CredentialsFile:     p.String("credentials", ""),
		CreateTopics:        p.Bool("create_topics", true),
		Ordered:             p.Bool("ordered", false),
		AckDeadline:         p.Duration("ack_deadline", DefaultAckDeadline),
		MaxDeliveryAttempts: p.Int("max_delivery_attempts", 0, 0),
		DeadLetterTopic:     p.String("dead_letter_topic", ""),
		InFlight:            p.Int("inflight", 0, 1),
		InFlightBytes:       p.Bytes("inflight_bytes", 0),
		Pullers:             p.Int("pullers", 0, 1),
		ReceiveTimeout:      p.Duration("receive_timeout", DefaultReceiveTimeout),
	}
	if u.User != nil || u.Port() != "" {
		p.Fail("", "the host is the project ID: no user, password or port (endpoint= and emulator= name a server)")
	}
	if u.Path != "" && u.Path != "/" {
		p.Fail("path", "a gcppubsub:// URL has no path: topics are named by Publish and Subscribe")
	}
	for _, pr := range c.problems(subscriber) {
		p.Fail(pr.param, "%s", pr.why)
	}
	return c, p.Err()
}

// NewPublisher returns a publisher to the topics of cfg.Project. ctx
// bounds finding the credentials only; the connection is made by the
// first call. The publisher is safe for concurrent use and implements
// relay.CapabilityReporter, relay.HealthChecker and relay.AsyncPublisher.
func NewPublisher(ctx context.Context, cfg Config) (relay.Publisher, error) {
	if err := cfg.Validate(false); err != nil {
		return nil, err
	}
	cfg.defaults()
	c, err := dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return driver.NewPublisher(&pubDriver{conn: c, caps: capabilities(cfg)}, 0), nil
}

// NewSubscriber returns a subscriber for cfg.Group: one subscription per
// topic, named by SubscriptionID and created when missing. ctx bounds
// finding the credentials only. It implements relay.Provisioner,
// relay.CapabilityReporter and relay.HealthChecker; relay.LagReporter
// reports relay.ErrNotSupported (the Pub/Sub API does not count a
// subscription's backlog; Cloud Monitoring does).
func NewSubscriber(ctx context.Context, cfg Config) (relay.Subscriber, error) {
	if err := cfg.Validate(true); err != nil {
		return nil, err
	}
	cfg.defaults()
	c, err := dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d := &subDriver{conn: c, caps: capabilities(cfg)}
	window, maxWindow := driver.AdaptiveWindow(cfg.InFlight, DefaultInFlight)
	return driver.NewSubscriber(d, driver.Options{
		InFlight:      window,
		MaxInFlight:   maxWindow,
		InFlightBytes: cfg.InFlightBytes,
		ExtendEvery:   cfg.extendEvery(),
		SettleBatch:   window,
		Logger:        cfg.Logger.With("backend", Scheme),
		Group:         cfg.Group,
	}), nil
}
