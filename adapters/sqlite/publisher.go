package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
)

func capabilities(maxBytes int) relay.Capabilities {
	return rowqueue.Capabilities("sqlite", maxBytes, maxBatch, "max_bytes= (at most 512 MiB)")
}

// NewPublisher returns a publisher on the database file cfg.Path, created
// with relay's tables when missing. ctx bounds opening it. The publisher
// is safe for concurrent use and implements relay.HealthChecker.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (relay.Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	s, err := openStore(ctx, cfg.File)
	if err != nil {
		return nil, err
	}
	return driver.NewPublisher(&pubDriver{s: s, caps: capabilities(cfg.MaxBytes)}, 0), nil
}

type pubDriver struct {
	s    *store
	caps relay.Capabilities
	// unhealthy is the error of the latest publish attempt that may pass
	// when tried again, nil once a publish went through.
	unhealthy atomic.Pointer[error]
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

// Health implements relay.HealthChecker without I/O: the lock error the
// latest publish attempt met, or nil.
func (d *pubDriver) Health() error {
	if p := d.unhealthy.Load(); p != nil {
		return fmt.Errorf("relay/sqlite: %w", *p)
	}
	return nil
}

// ValidateTopic implements driver.TopicValidator.
func (d *pubDriver) ValidateTopic(topic string) error { return rowqueue.CheckTopic(topic) }

// ValidateMessage implements driver.MessageValidator: text columns and
// the metadata's JSON take neither NUL bytes nor invalid UTF-8.
func (d *pubDriver) ValidateMessage(_ string, m *relay.Message) error {
	return rowqueue.CheckText(m, sqliteText)
}

// SendBatch makes one attempt: it inserts msgs in one transaction, so the
// batch is stored or not as a whole, and wakes the process's
// subscriptions of topic. A lock held by another process past
// busy_timeout is marked driver.Retryable.
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	return d.send(ctx, topic, "", msgs)
}

// SendBatchToGroup implements driver.GroupSendDriver: SendBatch with one
// delivery row per message, for group alone. A group that does not exist
// is a *relay.NoGroupError, and nothing is stored.
func (d *pubDriver) SendBatchToGroup(ctx context.Context, topic, group string, msgs []*relay.Message) error {
	return d.send(ctx, topic, group, msgs)
}

func (d *pubDriver) send(ctx context.Context, topic, group string, msgs []*relay.Message) error {
	err := d.s.write(ctx, func(ctx context.Context, tx *sql.Tx) error { return insert(ctx, tx, topic, group, msgs) })
	var ng *relay.NoGroupError
	switch {
	case errors.As(err, &ng):
		return err
	case err != nil:
		if retryable(err) {
			d.unhealthy.Store(&err)
		}
		return classify(fmt.Errorf("relay/sqlite: publishing to %q: %w", topic, err))
	}
	d.unhealthy.Store(nil)
	d.s.waiters.Wake(topic)
	return nil
}

// CheckGroups implements driver.GroupCheckDriver: publishing stores a
// message only for the groups the topic has at that moment, so a topic
// without one is a *relay.NoGroupError.
func (d *pubDriver) CheckGroups(ctx context.Context, topic string) error {
	var has bool
	if err := d.s.r.QueryRowContext(ctx, hasGroups, topic).Scan(&has); err != nil {
		return fmt.Errorf("relay/sqlite: looking for the groups of %q: %w", topic, err)
	}
	if !has {
		return &relay.NoGroupError{Backend: "sqlite", Topic: topic, Detail: "no row for it in relay_groups"}
	}
	return nil
}

// Close releases the file.
func (d *pubDriver) Close() error {
	d.s.release()
	return nil
}
