package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
)

// NewSubscriber returns a subscriber for cfg.Group that works through
// pool, plus one connection of its own (from pool's configuration) that
// LISTENs for new messages. The pool stays the caller's: Close does not
// close it. ctx bounds creating the schema. The subscriber is safe for
// concurrent use and implements relay.Provisioner, relay.LagReporter and
// relay.HealthChecker.
func NewSubscriber(ctx context.Context, pool *pgxpool.Pool, cfg SubscriberConfig) (relay.Subscriber, error) {
	return newSubscriber(ctx, pool, cfg, nil)
}

func newSubscriber(ctx context.Context, pool *pgxpool.Pool, cfg SubscriberConfig, dials *dialTracker) (relay.Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	d := &subDriver{pool: pool, cfg: cfg, own: dials != nil, dials: dials, q: newQueries(cfg.Schema), caps: capabilities(DefaultMaxBytes)}
	if err := d.schema.ensure(ctx, pool, cfg.Schema); err != nil {
		return nil, err
	}
	d.l = startListener(pool.Config().ConnConfig.Copy(), d.q, cfg.PingInterval, cfg.Logger)
	window, maxWindow := driver.AdaptiveWindow(cfg.InFlight, DefaultInFlight)
	return driver.NewSubscriber(d, rowqueue.Options(cfg.Group, window, maxWindow, cfg.InFlightBytes, cfg.Lease, cfg.Logger)), nil
}

type subDriver struct {
	pool   *pgxpool.Pool
	cfg    SubscriberConfig
	own    bool
	q      *queries
	caps   relay.Capabilities
	schema schemaOnce
	l      *listener
	// dials are the pool's connections when the subscriber opened it.
	dials *dialTracker
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

// Health implements relay.HealthChecker without network I/O: the problem
// of the LISTEN connection while it is down, or nil. (The shared layer
// adds the errors of failing claims.)
func (d *subDriver) Health() error {
	if err := d.l.health(); err != nil {
		return fmt.Errorf("relay/postgres: LISTEN connection: %w", err)
	}
	return nil
}

// Provision implements driver.ProvisionDriver: it creates the schema if
// needed and the group's row for topic, so that every message published
// to topic from now on gets a delivery row for the group. Idempotent.
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	if err := rowqueue.CheckTopic(topic); err != nil {
		return err
	}
	if err := d.schema.ensure(ctx, d.pool, d.cfg.Schema); err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, d.q.group, topic, d.cfg.Group); err != nil {
		return fmt.Errorf("relay/postgres: creating group %q of topic %q: %w", d.cfg.Group, topic, err)
	}
	return nil
}

// Subscribe implements driver.SubscribeDriver: it provisions the group,
// removes those of the topic's 1000 oldest message rows that no group
// needs any more, and starts a receiver.
func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.Provision(cctx, topic); err != nil {
		return nil, err
	}
	if _, err := d.pool.Exec(cctx, d.q.sweep, topic); err != nil {
		d.cfg.Logger.Warn("relay/postgres: removing message rows no group needs failed", "topic", topic, "err", err)
	}
	return newReceiver(d, topic), nil
}

// Close stops the LISTEN connection and closes the pool when the
// subscriber opened it from a URL.
func (d *subDriver) Close() error {
	d.l.cancel()
	if d.own {
		closePool(d.pool, d.dials)
	}
	d.l.stop()
	return nil
}

// RemoveTopic deletes every group, delivery and message row of topic.
// Idempotent. A message published to topic afterwards is not stored (a
// topic without groups keeps nothing).
func (d *subDriver) RemoveTopic(ctx context.Context, topic string) error {
	if err := rowqueue.CheckTopic(topic); err != nil {
		return err
	}
	if err := d.schema.ensure(ctx, d.pool, d.cfg.Schema); err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, d.q.remove, topic); err != nil {
		return fmt.Errorf("relay/postgres: removing topic %q: %w", topic, err)
	}
	return nil
}
