package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/rowqueue"
)

// Outbox writes messages inside the caller's transaction (the
// transactional outbox): they are stored, and delivered to the topic's
// groups, if and only if the transaction commits. The zero value is
// ready.
//
// The tables must exist in the transaction's database: a publisher or
// subscriber of the file creates them when opened, or run SchemaSQL.
type Outbox struct {
	// MaxBytes limits each message as PublisherConfig.MaxBytes does.
	// Default 64 MiB.
	MaxBytes int
}

// PublishTx publishes msgs to topic inside tx; see Outbox.PublishTx.
func PublishTx(ctx context.Context, tx *sql.Tx, topic string, msgs ...*relay.Message) error {
	return Outbox{}.PublishTx(ctx, tx, topic, msgs...)
}

// PublishTx inserts msgs for topic through tx, a transaction of the
// caller's *sql.DB on the database file (opened with modernc.org/sqlite,
// driver name "sqlite"; open it with _txlock=immediate so that its write
// transactions take the lock when they begin), which the caller commits
// or rolls back. Messages with an empty ID get a UUIDv7 (written into
// m.ID). Limits are checked as Publish does. Like Publish, a message is
// kept only for the groups that exist when it is written, and a
// DeliverAt in the future delays it. Subscriptions find the committed
// messages within their poll period (poll=, default 100ms): a commit
// wakes nobody. An error leaves tx to the caller.
func (o Outbox) PublishTx(ctx context.Context, tx *sql.Tx, topic string, msgs ...*relay.Message) error {
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if err := rowqueue.CheckOutbox(capabilities(maxBytes), sqliteText, topic, msgs); err != nil || len(msgs) == 0 {
		return err
	}
	if err := insert(ctx, tx, topic, "", msgs); err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return fmt.Errorf("relay/sqlite: publishing to %q in the transaction: %w (relay's tables do not exist: open a publisher or subscriber of the file once, or run SchemaSQL)", topic, err)
		}
		return fmt.Errorf("relay/sqlite: publishing to %q in the transaction: %w", topic, err)
	}
	return nil
}
