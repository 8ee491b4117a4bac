package inbox

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// SchemaSQL is the DDL of the inbox table, as shipped in inbox.sql, with
// SchemaPlaceholder where the schema name goes. EnsureSchema runs exactly
// this text.
//
//go:embed inbox.sql
var SchemaSQL string

// SchemaPlaceholder stands for the schema name in SchemaSQL.
const SchemaPlaceholder = "__SCHEMA__"

// DefaultSchema is the schema of the inbox table unless WithSchema says
// otherwise: relay's own schema, next to the outbox tables.
const DefaultSchema = "relay"

// DefaultPruneBatch is how many rows one statement of Prune deletes at
// most unless WithPruneBatch says otherwise.
const DefaultPruneBatch = 1000

// TxHandler handles one message inside tx, a transaction that also
// records the message as processed: its writes through tx commit together
// with that record. It returns the messages for the router to publish to
// the handler's outputs after the commit (see Inbox.Handler for what that
// guarantees), or an error to roll everything back. It must not commit or
// roll back tx.
type TxHandler func(ctx context.Context, tx pgx.Tx, m *relay.Message) ([]*relay.Message, error)

// SQLTxHandler is TxHandler for a database/sql transaction.
type SQLTxHandler func(ctx context.Context, tx *sql.Tx, m *relay.Message) ([]*relay.Message, error)

// Option configures New and NewSQL.
type Option func(*config)

type config struct {
	schema     string
	pruneBatch int
}

// WithSchema puts the inbox table in schema (default DefaultSchema).
func WithSchema(schema string) Option { return func(c *config) { c.schema = schema } }

// WithPruneBatch sets how many rows one statement of Prune deletes at most
// (default DefaultPruneBatch).
func WithPruneBatch(n int) Option { return func(c *config) { c.pruneBatch = n } }

// queries are the statements of one schema.
type queries struct {
	schema string
	ddl    string
	record string // $1 consumer, $2 message ID
	prune  string // $1 age in microseconds, $2 batch
	batch  int
}

func newQueries(opts []Option) (*queries, error) {
	c := config{schema: DefaultSchema, pruneBatch: DefaultPruneBatch}
	for _, o := range opts {
		o(&c)
	}
	if c.schema == "" || strings.ContainsRune(c.schema, 0) {
		return nil, fmt.Errorf("relay/inbox: schema %q is not a valid name", c.schema)
	}
	if c.pruneBatch < 1 {
		return nil, fmt.Errorf("relay/inbox: prune batch %d is not positive", c.pruneBatch)
	}
	s := pgx.Identifier{c.schema}.Sanitize()
	return &queries{
		schema: c.schema,
		ddl:    strings.ReplaceAll(SchemaSQL, SchemaPlaceholder, s),
		record: `INSERT INTO ` + s + `.inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		prune: `DELETE FROM ` + s + `.inbox WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM ` + s + `.inbox
	WHERE processed_at < now() - $1 * interval '1 microsecond'
	ORDER BY processed_at LIMIT $2)`,
		batch: c.pruneBatch,
	}, nil
}

// lockSQL serialises EnsureSchema callers of one schema, with the same
// lock as postgres.EnsureSchema, so that concurrent CREATE ... IF NOT
// EXISTS (of the inbox and of relay's tables in a shared schema) do not
// race.
const lockSQL = `SELECT pg_advisory_xact_lock(hashtext('relay schema ' || $1))`

func (q *queries) checkHandler(consumer string, fn bool) {
	if consumer == "" {
		panic("relay/inbox: Handler with an empty consumer name")
	}
	if !fn {
		panic("relay/inbox: Handler with a nil handler func")
	}
}

func noID(consumer string) error {
	return relay.Permanent(fmt.Errorf("relay/inbox: consumer %q: the message has no ID, so a redelivery could not be recognised", consumer))
}

func (q *queries) recordErr(consumer, id string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") {
		return fmt.Errorf("relay/inbox: consumer %q: recording message %q: %w (the inbox table does not exist in schema %q: call EnsureSchema once, or run inbox.sql)", consumer, id, err, q.schema)
	}
	return fmt.Errorf("relay/inbox: consumer %q: recording message %q: %w", consumer, id, err)
}

// pruneLoop runs del (one bounded DELETE returning its row count) until a
// batch comes back short, and returns the total.
func (q *queries) pruneLoop(ctx context.Context, olderThan time.Duration, del func(ctx context.Context, us int64, batch int) (int64, error)) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("relay/inbox: Prune(%v): the age must be positive", olderThan)
	}
	var total int64
	for {
		n, err := del(ctx, olderThan.Microseconds(), q.batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("relay/inbox: pruning rows older than %v: %w", olderThan, err)
		}
		if n < int64(q.batch) {
			return total, nil
		}
	}
}

// Inbox records, in schema.inbox of a PostgreSQL database reached through
// a pgx pool, which messages each consumer has processed, so that a
// handler's database writes happen once per (consumer, message ID). Safe
// for concurrent use.
type Inbox struct {
	pool *pgxpool.Pool
	q    *queries
}

// New returns an Inbox on pool. It does not touch the database; call
// EnsureSchema (or run inbox.sql) before the first message. It returns an
// error for an invalid option.
func New(pool *pgxpool.Pool, opts ...Option) (*Inbox, error) {
	if pool == nil {
		return nil, errors.New("relay/inbox: New with a nil pool")
	}
	q, err := newQueries(opts)
	if err != nil {
		return nil, err
	}
	return &Inbox{pool: pool, q: q}, nil
}

// EnsureSchema creates the schema and the inbox table if they do not
// exist, in one transaction under an advisory lock. Idempotent; safe to
// call from several processes at once.
func (in *Inbox) EnsureSchema(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockSQL, in.q.schema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, in.q.ddl)
		return err
	})
	if err != nil {
		return fmt.Errorf("relay/inbox: creating the inbox table in schema %q: %w", in.q.schema, err)
	}
	return nil
}

// Handler returns a router.Handler that runs fn at most once per message
// ID for consumer, and every time in a transaction that records the ID.
// Per message it:
//
//  1. begins a transaction and inserts (consumer, m.ID) into the inbox
//     table with ON CONFLICT DO NOTHING;
//  2. if the row exists already (the ID was processed and committed), rolls
//     back and returns no messages and no error, without calling fn: the
//     router acks the redelivery;
//  3. otherwise calls fn with the transaction and commits it; an error from
//     fn or from the commit rolls everything back (the inbox row too) and is
//     returned, so the router's retry, poison and redelivery apply.
//
// A concurrent delivery of the same ID waits in step 1 until the first
// transaction ends, then skips (committed) or proceeds (rolled back). A
// message without an ID fails with a relay.Permanent error.
//
// The effect in the database is exactly once per (consumer, message ID);
// the ack may still be repeated or lost (a crash after the commit brings
// the message back, and it is then acked without running fn). Messages fn
// returns are published by the router after the commit, so they are lost
// if the publish fails or the process stops in between: the redelivery is
// a duplicate and fn is not run again. Publish follow-up messages with
// postgres.PublishTx in tx instead (the transactional outbox), which makes
// them part of the same exactly-once effect. (The same holds when fn
// returns messages to a router handler without outputs: the router fails
// the message after the commit, and the redelivery is acked as a
// duplicate.)
//
// consumer scopes the IDs: handlers with different consumer names process
// the same message independently. Handler panics if consumer is empty or
// fn is nil.
func (in *Inbox) Handler(consumer string, fn TxHandler) router.Handler {
	in.q.checkHandler(consumer, fn != nil)
	return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		if m.ID == "" {
			return nil, noID(consumer)
		}
		tx, err := in.pool.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("relay/inbox: consumer %q: message %q: beginning the transaction: %w", consumer, m.ID, err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // no-op after Commit
		tag, err := tx.Exec(ctx, in.q.record, consumer, m.ID)
		if err != nil {
			return nil, in.q.recordErr(consumer, m.ID, err)
		}
		if tag.RowsAffected() == 0 {
			return nil, nil // processed before: ack without running fn
		}
		out, err := fn(ctx, tx, m)
		if err != nil {
			return nil, err
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, fmt.Errorf("relay/inbox: consumer %q: message %q: committing: %w", consumer, m.ID, err)
		}
		return out, nil
	}
}

// Prune deletes the inbox rows recorded more than olderThan ago, in
// statements of at most the prune batch (WithPruneBatch) rows each, until
// none is left, and returns how many it deleted. Run it periodically with
// an age longer than any message can come back after (the longest
// redelivery delay plus the source's retention): a message redelivered
// after its row is pruned is processed again. Safe to run concurrently
// with handlers and with other Prune calls.
func (in *Inbox) Prune(ctx context.Context, olderThan time.Duration) (int64, error) {
	return in.q.pruneLoop(ctx, olderThan, func(ctx context.Context, us int64, batch int) (int64, error) {
		tag, err := in.pool.Exec(ctx, in.q.prune, us, batch)
		return tag.RowsAffected(), err
	})
}

// SQLInbox is Inbox for a database/sql handle on PostgreSQL (any driver;
// pgx's stdlib driver if the handler also uses postgres.PublishSQLTx).
// Safe for concurrent use.
type SQLInbox struct {
	db *sql.DB
	q  *queries
}

// NewSQL returns an SQLInbox on db; see New.
func NewSQL(db *sql.DB, opts ...Option) (*SQLInbox, error) {
	if db == nil {
		return nil, errors.New("relay/inbox: NewSQL with a nil *sql.DB")
	}
	q, err := newQueries(opts)
	if err != nil {
		return nil, err
	}
	return &SQLInbox{db: db, q: q}, nil
}

// EnsureSchema is Inbox.EnsureSchema.
func (in *SQLInbox) EnsureSchema(ctx context.Context) error {
	err := in.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, lockSQL, in.q.schema); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, in.q.ddl)
		return err
	})
	if err != nil {
		return fmt.Errorf("relay/inbox: creating the inbox table in schema %q: %w", in.q.schema, err)
	}
	return nil
}

func (in *SQLInbox) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Handler is Inbox.Handler with a database/sql transaction.
func (in *SQLInbox) Handler(consumer string, fn SQLTxHandler) router.Handler {
	in.q.checkHandler(consumer, fn != nil)
	return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		if m.ID == "" {
			return nil, noID(consumer)
		}
		tx, err := in.db.BeginTx(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("relay/inbox: consumer %q: message %q: beginning the transaction: %w", consumer, m.ID, err)
		}
		defer func() { _ = tx.Rollback() }() // no-op after Commit
		res, err := tx.ExecContext(ctx, in.q.record, consumer, m.ID)
		if err != nil {
			return nil, in.q.recordErr(consumer, m.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, in.q.recordErr(consumer, m.ID, err)
		} else if n == 0 {
			return nil, nil // processed before: ack without running fn
		}
		out, err := fn(ctx, tx, m)
		if err != nil {
			return nil, err
		}
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("relay/inbox: consumer %q: message %q: committing: %w", consumer, m.ID, err)
		}
		return out, nil
	}
}

// Prune is Inbox.Prune.
func (in *SQLInbox) Prune(ctx context.Context, olderThan time.Duration) (int64, error) {
	return in.q.pruneLoop(ctx, olderThan, func(ctx context.Context, us int64, batch int) (int64, error) {
		res, err := in.db.ExecContext(ctx, in.q.prune, us, batch)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}
