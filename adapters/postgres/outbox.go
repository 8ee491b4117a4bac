package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Outbox writes messages inside the caller's transaction (the
// transactional outbox): they are stored, and delivered to the topic's
// groups, if and only if the transaction commits. The zero value uses
// DefaultSchema.
//
// The schema must exist: a publisher or subscriber of the schema creates
// it when opened, or run schema.sql (see SchemaFor) in a migration.
type Outbox struct {
	// Schema holds relay's tables. Default "relay".
	Schema string
	// MaxBytes limits each message as PublisherConfig.MaxBytes does.
	// Default 64 MiB.
	MaxBytes int
}

// PublishTx publishes msgs to topic inside tx with the default schema;
// see Outbox.PublishTx.
func PublishTx(ctx context.Context, tx pgx.Tx, topic string, msgs ...*relay.Message) error {
	return Outbox{}.PublishTx(ctx, tx, topic, msgs...)
}

// PublishSQLTx publishes msgs to topic inside tx with the default schema;
// see Outbox.PublishSQLTx.
func PublishSQLTx(ctx context.Context, tx *sql.Tx, topic string, msgs ...*relay.Message) error {
	return Outbox{}.PublishSQLTx(ctx, tx, topic, msgs...)
}

func (o Outbox) prepare(topic string, msgs []*relay.Message) (*queries, error) {
	schema := o.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	if err := checkSchema(schema); err != nil {
		return nil, err
	}
	if topic == "" {
		return nil, fmt.Errorf("%w: empty", relay.ErrInvalidTopic)
	}
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	caps := capabilities(maxBytes)
	for i, m := range msgs {
		if m == nil {
			return nil, relay.NilMessageError(i)
		}
		if m.ID == "" {
			m.ID = relay.NewID()
		}
		if err := driver.CheckSize(m, caps); err != nil {
			return nil, err
		}
		if err := driver.CheckDelay(m, caps, time.Now()); err != nil {
			return nil, err
		}
		if err := checkText(m); err != nil {
			return nil, err
		}
	}
	return newQueries(schema), nil
}

// PublishTx inserts msgs for topic through tx, a pgx transaction the
// caller commits or rolls back, and queues a notification that
// PostgreSQL sends on commit. Messages with an empty ID get a UUIDv7
// (written into m.ID). Limits are checked as Publish does. Like Publish,
// a message is kept only for the groups that exist when it is written.
// An error leaves tx to the caller (after a failed statement PostgreSQL
// accepts only a rollback).
func (o Outbox) PublishTx(ctx context.Context, tx pgx.Tx, topic string, msgs ...*relay.Message) error {
	q, err := o.prepare(topic, msgs)
	if err != nil || len(msgs) == 0 {
		return err
	}
	if err := tx.SendBatch(ctx, q.batch(topic, msgs)).Close(); err != nil {
		return outboxErr(topic, err)
	}
	return nil
}

// PublishSQLTx is PublishTx for a database/sql transaction. The *sql.DB
// must use pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib,
// driver name "pgx"), which passes the text arrays of the metadata
// through.
func (o Outbox) PublishSQLTx(ctx context.Context, tx *sql.Tx, topic string, msgs ...*relay.Message) error {
	q, err := o.prepare(topic, msgs)
	if err != nil || len(msgs) == 0 {
		return err
	}
	for _, m := range msgs {
		if _, err := tx.ExecContext(ctx, q.insert, toRow(m).args(topic)...); err != nil {
			return outboxErr(topic, err)
		}
	}
	if _, err := tx.ExecContext(ctx, q.notify, q.channel, notifyPayload(topic)); err != nil {
		return outboxErr(topic, err)
	}
	return nil
}

func outboxErr(topic string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") {
		return fmt.Errorf("relay/postgres: publishing to %q in the transaction: %w (relay's tables do not exist: open a publisher or subscriber of the schema once, or run schema.sql)", topic, err)
	}
	return fmt.Errorf("relay/postgres: publishing to %q in the transaction: %w", topic, err)
}
