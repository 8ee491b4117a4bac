package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

func (c *SubscriberConfig) defaults() {
	c.AckWait = cmp.Or(c.AckWait, DefaultAckWait)
	if c.MaxAckPending == 0 {
		c.MaxAckPending = max(DefaultMaxAckPending, cmp.Or(c.InFlight, driver.DefaultMaxInFlight)*MembersPerGroup)
	}
	c.FetchWait = cmp.Or(c.FetchWait, DefaultFetchWait)
	c.Logger = cmp.Or(c.Logger, slog.Default())
}

// NewSubscriber returns a subscriber for cfg.Group that reads through nc;
// streams it creates use sc (or it uses sc.Stream). The connection stays
// the caller's: Close does not close it. The subscriber is safe for
// concurrent use and implements relay.Provisioner, relay.LagReporter and
// relay.HealthChecker.
func NewSubscriber(nc *natsgo.Conn, sc StreamConfig, cfg SubscriberConfig) (relay.Subscriber, error) {
	return newSubscriber(nc, sc, cfg, false)
}

func newSubscriber(nc *natsgo.Conn, sc StreamConfig, cfg SubscriberConfig, own bool) (relay.Subscriber, error) {
	if err := errors.Join(sc.Validate(), cfg.Validate()); err != nil {
		return nil, err
	}
	sc.defaults()
	cfg.defaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	window, maxWindow := driver.AdaptiveWindow(cfg.InFlight, DefaultInFlight)
	d := &subDriver{nc: nc, own: own, js: js, streams: &streams{js: js, cfg: sc}, cfg: cfg,
		caps: capabilities(int(nc.MaxPayload())), window: window, maxWindow: maxWindow}
	return driver.NewSubscriber(d, driver.Options{
		InFlight:      window,
		MaxInFlight:   maxWindow,
		InFlightBytes: cfg.InFlightBytes,
		ExtendEvery:   cfg.AckWait / 3,
		Logger:        cfg.Logger,
		Group:         cfg.Group,
	}), nil
}

type subDriver struct {
	nc      *natsgo.Conn
	own     bool // nc was opened from a URL: Close closes it
	js      jetstream.JetStream
	streams *streams
	cfg     SubscriberConfig
	caps    relay.Capabilities
	warned  sync.Map // stream + "/" + consumer whose window cap was logged
	// window is where a subscription's window starts, maxWindow how far an
	// adaptive one grows (both InFlight when the user set it).
	window, maxWindow int
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

// HoldsUntilDue implements driver.DueHolder: a message whose
// relay-deliver-at header is in the future is nacked with NakWithDelay
// until then instead of being delivered.
func (d *subDriver) HoldsUntilDue() bool { return true }

// Health implements relay.HealthChecker: the connection's status.
func (d *subDriver) Health() error { return connHealth(d.nc) }

// ValidateTopic implements driver.TopicValidator.
func (d *subDriver) ValidateTopic(topic string) error { return validateTopic(topic) }

// consumerName is the group's durable consumer for topic.
func (d *subDriver) consumerName(topic string) string {
	if d.streams.cfg.Stream != "" {
		return ConsumerName(d.cfg.Group + "_" + topic)
	}
	return ConsumerName(d.cfg.Group)
}

// consumer returns the group's durable pull consumer of topic, creating
// the stream (unless stream= names one) and the consumer when missing. An
// existing consumer is used as it is.
func (d *subDriver) consumer(ctx context.Context, topic string) (jetstream.Consumer, string, error) {
	if err := validateTopic(topic); err != nil {
		return nil, "", err
	}
	stream, err := d.streams.name(ctx, topic)
	if err != nil {
		return nil, "", err
	}
	name := d.consumerName(topic)
	c, err := d.js.Consumer(ctx, stream, name)
	if err == nil {
		return c, stream, nil
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if d.streams.cfg.Stream != "" {
			return nil, "", fmt.Errorf("relay/nats: stream %q (stream=) does not exist; create it with subject %q, or leave stream= out to let relay create one per topic", stream, topic)
		}
		d.streams.forget(topic)
		return nil, "", fmt.Errorf("relay/nats: stream %q of topic %q was deleted; retrying creates it: %w", stream, topic, err)
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, "", fmt.Errorf("relay/nats: looking up consumer %q on stream %q: %w", name, stream, err)
	}
	maxDeliver := d.cfg.MaxDeliver
	if maxDeliver <= 0 {
		maxDeliver = -1
	}
	c, err = d.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "relay group " + d.cfg.Group + " of topic " + topic,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.cfg.AckWait,
		MaxDeliver:    maxDeliver,
		MaxAckPending: d.cfg.MaxAckPending,
		FilterSubject: topic,
	})
	if errors.Is(err, jetstream.ErrConsumerExists) {
		c, err = d.js.Consumer(ctx, stream, name) // created meanwhile by another subscriber
	}
	if err != nil {
		return nil, "", fmt.Errorf("relay/nats: creating consumer %q on stream %q: %w", name, stream, err)
	}
	return c, stream, nil
}

// Provision implements driver.ProvisionDriver: it creates the topic's
// stream and the group's durable consumer, so that messages published
// afterwards are kept for the group. Idempotent.
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	_, _, err := d.consumer(ctx, topic)
	return err
}

func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, stream, err := d.consumer(cctx, topic)
	cancel()
	if err != nil {
		return nil, err
	}
	r := &receiver{nc: d.nc, stream: stream}
	// The consumer's own limit: an existing consumer keeps its settings,
	// which may differ from max_ack_pending= (-1: none).
	info := c.CachedInfo()
	if info != nil {
		r.window = d.windowLimit(info)
	}
	// The largest the window gets: the puller's buffer holds two requests
	// of it.
	window := d.maxWindow
	if r.window > 0 {
		window = min(window, r.window)
	}
	if r.pull, err = newPuller(d.nc, c, stream, d.consumerName(topic), d.cfg.FetchWait, window); err != nil {
		return nil, err
	}
	return r, nil
}

// windowLimit is the most a subscription's window may be on the consumer
// info describes: half its MaxAckPending, so that one member never holds
// what the group's others need (the server delivers nothing to anyone
// while the group holds MaxAckPending unacknowledged messages), and an
// adaptive window grows no further; 0 when the consumer has no limit. The
// first time it caps a window the user set (inflight=) it logs a warning
// saying so.
func (d *subDriver) windowLimit(info *jetstream.ConsumerInfo) int {
	maxPending := info.Config.MaxAckPending
	if maxPending <= 0 {
		return 0
	}
	limit := max(1, maxPending/2)
	if d.cfg.InFlight == 0 || d.cfg.InFlight <= limit {
		return limit
	}
	if _, seen := d.warned.LoadOrStore(info.Stream+"/"+info.Name, true); !seen {
		d.cfg.Logger.Warn("relay/nats: the group's consumer allows fewer unacknowledged messages than two windows; "+
			"this subscriber's window is capped at half of them so that other members of the group are not starved. "+
			"Raise the consumer's max_ack_pending (nats consumer edit) or lower inflight=",
			"stream", info.Stream, "consumer", info.Name, "max_ack_pending", maxPending,
			"inflight", d.cfg.InFlight, "window", limit)
	}
	return limit
}

// Close closes the connection, when the subscriber opened it from a URL,
// without draining (every subscription has ended by now).
func (d *subDriver) Close() error {
	if d.own {
		d.nc.Close()
	}
	return nil
}

// RemoveTopic deletes the topic's stream, or, when stream= names a shared
// stream, the group's consumer and the topic's messages in it. Idempotent.
func (d *subDriver) RemoveTopic(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	defer d.streams.forget(topic)
	if shared := d.streams.cfg.Stream; shared != "" {
		err := d.js.DeleteConsumer(ctx, shared, d.consumerName(topic))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("relay/nats: deleting consumer %q of stream %q: %w", d.consumerName(topic), shared, err)
		}
		s, err := d.js.Stream(ctx, shared)
		if err != nil {
			return fmt.Errorf("relay/nats: looking up stream %q: %w", shared, err)
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(topic)); err != nil {
			return fmt.Errorf("relay/nats: purging subject %q of stream %q: %w", topic, shared, err)
		}
		return nil
	}
	name := StreamName(topic)
	if err := d.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("relay/nats: deleting stream %q of topic %q: %w", name, topic, err)
	}
	return nil
}
