package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaSQL is the DDL of relay's tables, as shipped in schema.sql, with
// the placeholder SchemaPlaceholder where the schema name goes. The
// adapter runs exactly this text (see EnsureSchema).
//
//go:embed schema.sql
var SchemaSQL string

// SchemaPlaceholder stands for the schema name in SchemaSQL.
const SchemaPlaceholder = "__SCHEMA__"

// SchemaFor returns SchemaSQL for schema (a name as accepted by schema=).
func SchemaFor(schema string) (string, error) {
	if err := checkSchema(schema); err != nil {
		return "", err
	}
	return strings.ReplaceAll(SchemaSQL, SchemaPlaceholder, pgx.Identifier{schema}.Sanitize()), nil
}

// EnsureSchema creates schema and relay's tables in it if they do not
// exist. When every table and index of SchemaSQL is there already it
// changes nothing and takes no table lock: CREATE INDEX IF NOT EXISTS
// takes a SHARE lock on its table before it finds the index, which waits
// for every open write to the table and, inside the one DDL transaction,
// deadlocked against publishes and acks of a running schema (a process
// opening a publisher under load failed with SQLSTATE 40P01). Otherwise
// it runs SchemaFor(schema) in one transaction under a transaction-scoped
// advisory lock, so concurrent callers (several processes starting at
// once) do not race on CREATE ... IF NOT EXISTS. Idempotent.
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	ddl, err := SchemaFor(schema)
	if err != nil {
		return err
	}
	if ok, err := schemaComplete(ctx, pool, schema); err != nil {
		return fmt.Errorf("relay/postgres: creating schema %q: looking for its tables: %w", schema, err)
	} else if ok {
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("relay/postgres: creating schema %q: %w", schema, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('relay schema ' || $1))`, schema); err != nil {
		return fmt.Errorf("relay/postgres: creating schema %q: taking the advisory lock: %w", schema, err)
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("relay/postgres: creating schema %q: %w (the connecting role needs CREATE on the database, or create the schema ahead from schema.sql)", schema, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("relay/postgres: creating schema %q: %w", schema, err)
	}
	return nil
}

// schemaObjects are the names of the tables and indexes SchemaSQL
// creates, in the order it creates them.
var schemaObjects = func() []string {
	var names []string
	for _, m := range createRE.FindAllStringSubmatch(SchemaSQL, -1) {
		names = append(names, m[1])
	}
	return names
}()

// createRE matches SchemaSQL's CREATE TABLE and CREATE INDEX statements;
// its group is the object's name without the schema.
var createRE = regexp.MustCompile(`(?m)^CREATE (?:TABLE|INDEX) IF NOT EXISTS (?:` + SchemaPlaceholder + `\.)?([a-z_]+)`)

// schemaComplete reports whether every table and index of SchemaSQL
// exists in schema, reading only the catalog.
func schemaComplete(ctx context.Context, pool *pgxpool.Pool, schema string) (bool, error) {
	qualified := make([]string, len(schemaObjects))
	for i, name := range schemaObjects {
		qualified[i] = pgx.Identifier{schema, name}.Sanitize()
	}
	var missing int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]) AS o(name) WHERE to_regclass(o.name) IS NULL`, qualified).Scan(&missing)
	return err == nil && missing == 0, err
}

// schemaOnce remembers per pool and schema that EnsureSchema succeeded, so
// that each Subscribe does not take the advisory lock again.
type schemaOnce struct {
	mu   sync.Mutex
	done bool
}

func (o *schemaOnce) ensure(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return nil
	}
	if err := EnsureSchema(ctx, pool, schema); err != nil {
		return err
	}
	o.done = true
	return nil
}

// queries are the statements of one schema.
type queries struct {
	channel  string // NOTIFY channel
	insert   string
	notify   string
	group    string
	hasGroup string
	// insertFor and groupExists are insert and hasGroup for one group
	// ($8): PublishToGroup.
	insertFor   string
	groupExists string
	claim       string
	nextDue     string
	lock        string
	ack         string
	cleanup     string
	nack        string
	extend      string
	release     string
	lag         string
	history     string
	sweep       string
	remove      string
	listenOn    string
}

// sweepBatch is how many of a topic's oldest message rows one sweep looks
// at, deleting those no group needs.
const sweepBatch = 1000

func newQueries(schema string) *queries {
	s := pgx.Identifier{schema}.Sanitize()
	channel := "relay_" + schema
	r := strings.NewReplacer("S.", s+".")
	return &queries{
		channel:  channel,
		listenOn: "LISTEN " + pgx.Identifier{channel}.Sanitize(),
		// One statement per message: the message row once, one delivery
		// row per group of the topic; nothing when the topic has no group.
		// $7 is the delivery delay in microseconds (Message.DeliverAt),
		// added to clock_timestamp(), not now(): in an outbox transaction
		// now() is when the transaction began, maybe long before.
		insert: r.Replace(`WITH m AS (
	INSERT INTO S.messages (topic, relay_id, key, md_keys, md_values, payload)
	SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM S.groups WHERE topic = $1)
	RETURNING id)
INSERT INTO S.deliveries (topic, group_name, message_id, visible_at)
SELECT $1, g.name, m.id, CASE WHEN $7::bigint > 0 THEN clock_timestamp() + $7::bigint * interval '1 microsecond' ELSE now() END
FROM m, S.groups g WHERE g.topic = $1`),
		// $1 topic, $2 group: how long until the group's next row becomes
		// claimable (a delayed message falls due, a lease runs out), in
		// microseconds; NULL when none waits. Run only after a claim found
		// nothing, it reads the group's rows that are not claimable.
		nextDue: r.Replace(`SELECT (extract(epoch FROM min(visible_at) - clock_timestamp()) * 1000000)::bigint
FROM S.deliveries WHERE topic = $1 AND group_name = $2 AND visible_at > now()`),
		notify: `SELECT pg_notify($1, $2)`,
		group:  r.Replace(`INSERT INTO S.groups (topic, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`),
		// Whether topic $1 has a group, which publishing needs (see insert).
		hasGroup: r.Replace(`SELECT EXISTS (SELECT 1 FROM S.groups WHERE topic = $1)`),
		insertFor: r.Replace(`WITH m AS (
	INSERT INTO S.messages (topic, relay_id, key, md_keys, md_values, payload)
	SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM S.groups WHERE topic = $1 AND name = $8)
	RETURNING id)
INSERT INTO S.deliveries (topic, group_name, message_id, visible_at)
SELECT $1, $8, m.id, CASE WHEN $7::bigint > 0 THEN clock_timestamp() + $7::bigint * interval '1 microsecond' ELSE now() END
FROM m`),
		groupExists: r.Replace(`SELECT EXISTS (SELECT 1 FROM S.groups WHERE topic = $1 AND name = $2)`),
		// Every group, delivery and message row of topic $1, in one statement.
		remove: r.Replace(`WITH g AS (DELETE FROM S.groups WHERE topic = $1),
d AS (DELETE FROM S.deliveries WHERE topic = $1)
DELETE FROM S.messages WHERE topic = $1`),
		// $1 topic, $2 group, $3 limit, $4 lease in microseconds, $5 holder.
		// The locked rows are updated by ctid (a TID scan): joining on
		// message_id lets the planner, with the statistics of tables that
		// just grew from empty, loop over every row of the group per
		// claimed row: a claim's cost would grow with the backlog.
		claim: r.Replace(`WITH c AS (
	SELECT ctid FROM S.deliveries
	WHERE topic = $1 AND group_name = $2 AND visible_at <= now()
	ORDER BY message_id LIMIT $3 FOR UPDATE SKIP LOCKED),
u AS (
	UPDATE S.deliveries d
	SET visible_at = now() + $4 * interval '1 microsecond', attempts = d.attempts + 1, lease_holder = $5
	WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM c))
	RETURNING d.message_id, d.attempts)
SELECT u.message_id, u.attempts, m.relay_id, m.key, m.md_keys, m.md_values, m.payload
FROM u JOIN S.messages m ON m.id = u.message_id ORDER BY u.message_id`),
		// An ack is ack, lock and cleanup in one transaction (see
		// queueAcks). lock takes, in id order, the rows of the acked
		// messages that another group still has a delivery row for (the
		// ack's own rows are gone in its own snapshot), so that of two
		// groups acking the same message at once the later one waits for
		// the other to commit; its cleanup, a later statement with a fresh
		// snapshot, then sees both delivery rows gone and removes the
		// message row. Without the lock each cleanup could see the other
		// group's row and both would keep the message. A message that no
		// other group has a row for is not locked (no lock to write for
		// the common single-group topic): whoever saw no other row at the
		// lock sees none at the cleanup either, and of two groups acking
		// together at least one sees the other's row, since each deletes
		// its row before its lock statement begins and commits after it.
		ack: r.Replace(`DELETE FROM S.deliveries WHERE topic = $1 AND group_name = $2 AND message_id = ANY($3)`),
		//
		// In lock and cleanup, d.message_id = ANY($1) repeats what the
		// join implies, so that the planner reads only the acked ids'
		// delivery rows: without it, it joins by hashing every delivery
		// row of the table, so that an ack's cost grows with the backlog.
		lock: r.Replace(`SELECT 1 FROM S.messages m WHERE m.id = ANY($1)
	AND EXISTS (SELECT 1 FROM S.deliveries d WHERE d.message_id = m.id AND d.message_id = ANY($1))
ORDER BY m.id FOR UPDATE`),
		cleanup: r.Replace(`DELETE FROM S.messages m WHERE m.id = ANY($1)
	AND NOT EXISTS (SELECT 1 FROM S.deliveries d WHERE d.message_id = m.id AND d.message_id = ANY($1))`),
		// $3 ids, $4 delays in microseconds, $5 holder.
		nack: r.Replace(`UPDATE S.deliveries d
SET visible_at = now() + u.us * interval '1 microsecond', lease_holder = NULL
FROM unnest($3::bigint[], $4::bigint[]) AS u(id, us)
WHERE d.topic = $1 AND d.group_name = $2 AND d.message_id = u.id AND d.lease_holder = $5`),
		extend: r.Replace(`UPDATE S.deliveries SET visible_at = now() + $4 * interval '1 microsecond'
WHERE topic = $1 AND group_name = $2 AND message_id = ANY($3) AND lease_holder = $5`),
		release: r.Replace(`UPDATE S.deliveries SET visible_at = now(), lease_holder = NULL
WHERE topic = $1 AND group_name = $2 AND message_id = ANY($3) AND lease_holder = $4`),
		lag: r.Replace(`SELECT count(*) FROM S.deliveries WHERE topic = $1 AND group_name = $2`),
		// One page of ReadHistory, on the messages (topic, id) index.
		history: r.Replace(`SELECT id, relay_id, key, md_keys, md_values, payload, created_at FROM S.messages
WHERE topic = $1 AND id > $2 AND created_at >= $3 AND created_at < $4 ORDER BY id LIMIT $5`),
		// The sweep looks only at the topic's oldest sweepBatch message
		// rows, one index probe each (the scalar subquery keeps the planner
		// from hashing the whole deliveries table), so that its cost does
		// not grow with the backlog, as looking at every row of the topic
		// would.
		sweep: r.Replace(`DELETE FROM S.messages WHERE id IN (
	SELECT m.id FROM (SELECT id FROM S.messages WHERE topic = $1 ORDER BY id LIMIT ` + fmt.Sprint(sweepBatch) + `) o
	JOIN S.messages m ON m.id = o.id
	WHERE (SELECT 1 FROM S.deliveries d WHERE d.message_id = m.id LIMIT 1) IS NULL
	FOR UPDATE OF m SKIP LOCKED)`),
	}
}

// ackStatements is how many statements queueAcks queues for a non-empty
// list of acks.
const ackStatements = 3

// queueAcks queues the statements of an ack (ack, lock and cleanup; see
// newQueries) of the message ids acks, nothing when there are none. They
// must run in one transaction (one pgx.Batch does).
func (q *queries) queueAcks(b *pgx.Batch, topic, group string, acks []int64) {
	if len(acks) == 0 {
		return
	}
	b.Queue(q.ack, topic, group, acks)
	b.Queue(q.lock, acks)
	b.Queue(q.cleanup, acks)
}

// closeTimeout bounds closing the pool's connections: a server that
// stopped answering must not hold Close (pgxpool alone waits up to 15s
// per connection).
const closeTimeout = time.Second

// closePool closes pool's idle connections within closeTimeout (sending
// each a Terminate when the server still reads), cuts what is left (see
// dialTracker; t may be nil for a pool opened by the caller), then closes
// the pool. Called when nothing is using the pool any more.
func closePool(pool *pgxpool.Pool, t *dialTracker) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range pool.AcquireAllIdle(ctx) {
		conn := c.Hijack()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = conn.Close(ctx)
		}()
	}
	wg.Wait()
	if t != nil {
		t.cut()
	}
	pool.Close()
}
