package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
)

func capabilities(maxBytes int) relay.Capabilities {
	return rowqueue.Capabilities("postgres", maxBytes, maxBatch, "max_bytes= (at most 512 MiB)")
}

// NewPublisher returns a publisher that writes through pool. The pool
// stays the caller's: Close does not close it. ctx bounds creating the
// schema (see EnsureSchema). The publisher is safe for concurrent use.
func NewPublisher(ctx context.Context, pool *pgxpool.Pool, cfg PublisherConfig) (relay.Publisher, error) {
	return newPublisher(ctx, pool, cfg, nil)
}

func newPublisher(ctx context.Context, pool *pgxpool.Pool, cfg PublisherConfig, dials *dialTracker) (relay.Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	if err := EnsureSchema(ctx, pool, cfg.Schema); err != nil {
		return nil, err
	}
	d := &pubDriver{pool: pool, cfg: cfg, own: dials != nil, dials: dials, q: newQueries(cfg.Schema), caps: capabilities(cfg.MaxBytes)}
	return driver.NewPublisher(d, 0), nil
}

type pubDriver struct {
	pool *pgxpool.Pool
	cfg  PublisherConfig
	own  bool
	q    *queries
	caps relay.Capabilities
	// dials are the pool's connections when the publisher opened it.
	dials *dialTracker
	// unhealthy is the connection error of the latest publish attempt,
	// nil once a publish went through.
	unhealthy atomic.Pointer[error]
}

// Health implements relay.HealthChecker without network I/O: the
// connection error the latest publish attempt met, or nil.
func (d *pubDriver) Health() error {
	if p := d.unhealthy.Load(); p != nil {
		return fmt.Errorf("relay/postgres: %w", *p)
	}
	return nil
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

// ValidateTopic implements driver.TopicValidator.
func (d *pubDriver) ValidateTopic(topic string) error { return rowqueue.CheckTopic(topic) }

// CheckGroups implements driver.GroupCheckDriver: publishing stores a
// message only for the groups the topic has at that moment (rows of the
// groups table, made by Provision and Subscribe), so a topic without one
// is a *relay.NoGroupError.
func (d *pubDriver) CheckGroups(ctx context.Context, topic string) error {
	var has bool
	if err := d.pool.QueryRow(ctx, d.q.hasGroup, topic).Scan(&has); err != nil {
		return fmt.Errorf("relay/postgres: looking for the groups of %q: %w", topic, err)
	}
	if !has {
		return &relay.NoGroupError{Backend: "postgres", Topic: topic,
			Detail: fmt.Sprintf("no row for it in %s.groups", d.cfg.Schema)}
	}
	return nil
}

// SendBatchToGroup implements driver.GroupSendDriver: SendBatch with one
// delivery row per message, for group alone. A group that does not exist
// (no groups row) is a *relay.NoGroupError, and nothing is stored.
func (d *pubDriver) SendBatchToGroup(ctx context.Context, topic, group string, msgs []*relay.Message) error {
	var exists bool
	if err := d.pool.QueryRow(ctx, d.q.groupExists, topic, group).Scan(&exists); err != nil {
		return d.sendFailed(ctx, topic, err)
	}
	if !exists {
		return &relay.NoGroupError{Backend: "postgres", Topic: topic, Group: group,
			Detail: fmt.Sprintf("no row for it in %s.groups", d.cfg.Schema)}
	}
	b := &pgx.Batch{}
	for _, m := range msgs {
		b.Queue(d.q.insertFor, append(toRow(m).args(topic), group)...)
	}
	b.Queue(d.q.notify, d.q.channel, notifyPayload(topic))
	return d.sendFailed(ctx, topic, d.pool.SendBatch(ctx, b).Close())
}

// ValidateMessage implements driver.MessageValidator: text columns take
// neither NUL bytes nor invalid UTF-8.
func (d *pubDriver) ValidateMessage(_ string, m *relay.Message) error {
	return rowqueue.CheckText(m, pgText)
}

// SendBatch makes one attempt: it inserts msgs in one transaction (one
// pipelined round trip: one insert per message and a NOTIFY), so the
// batch is accepted or rejected as a whole. A connection problem is
// marked driver.Retryable, so that the shared publisher sends the batch
// again with backoff until ctx is done; a batch whose commit was in doubt
// may then be stored twice (at-least-once).
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	// A fresh batch per attempt: pgx stores the statement descriptions of
	// one connection in the queued queries.
	return d.sendFailed(ctx, topic, d.pool.SendBatch(ctx, d.q.batch(topic, msgs)).Close())
}

// sendFailed classifies err, the outcome of one attempt to publish to
// topic, as SendBatch reports it (nil for nil).
func (d *pubDriver) sendFailed(ctx context.Context, topic string, err error) error {
	switch {
	case err == nil:
		d.unhealthy.Store(nil)
		return nil
	case transient(err) && ctx.Err() == nil:
		d.unhealthy.Store(&err)
		return driver.Retryable(err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("relay/postgres: publishing to %q: %w: %v", topic, ctx.Err(), err)
	}
	return fmt.Errorf("relay/postgres: publishing to %q: %w", topic, err)
}

// batch queues the insert of every message and one NOTIFY.
func (q *queries) batch(topic string, msgs []*relay.Message) *pgx.Batch {
	b := &pgx.Batch{}
	for _, m := range msgs {
		b.Queue(q.insert, toRow(m).args(topic)...)
	}
	b.Queue(q.notify, q.channel, notifyPayload(topic))
	return b
}

// maxNotifyPayload keeps below PostgreSQL's 8000-byte notification limit.
const maxNotifyPayload = 7900

// notifyPayload is the topic, or "" (wake every subscription) for a topic
// too long for a notification.
func notifyPayload(topic string) string {
	if len(topic) > maxNotifyPayload {
		return ""
	}
	return topic
}

// transient reports whether err is a connection problem worth retrying,
// rather than a statement PostgreSQL rejected.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// connection exceptions, operator intervention (shutdown), insufficient resources
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") || strings.HasPrefix(pe.Code, "53")
	}
	return true
}

// Close closes the pool when the publisher opened it from a URL.
func (d *pubDriver) Close() error {
	if d.own {
		closePool(d.pool, d.dials)
	}
	return nil
}
