package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres/inbox"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// testSchema is this test run's own schema, dropped when the run ends.
var testSchema = "relay_inbox_test_" + strings.ToLower(strings.ReplaceAll(relay.NewID(), "-", "")[20:])

// childMain, when set (by the faults build), runs instead of the tests in
// a re-executed test binary whose environment has childEnv.
var childMain func() int

const childEnv = "RELAY_INBOX_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" && childMain != nil {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		dropSchema()
		os.Exit(code)
	}))
}

func dropSchema() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testenv.URL("RELAY_TEST_POSTGRES_URL", testenv.DefaultPostgresURL))
	if err != nil {
		return // the server is not there: nothing was created
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{testSchema}.Sanitize()+" CASCADE"); err != nil {
		fmt.Fprintf(os.Stderr, "dropping test schema %s: %v\n", testSchema, err)
	}
}

// table is the quoted name of a table in the test schema.
func table(name string) string { return pgx.Identifier{testSchema, name}.Sanitize() }

// rawPool is a pgx pool on the test server, closed at cleanup.
func rawPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16 // room for the blocked deliveries of TestConcurrentDeliveries and the test's own queries
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// effectsDDL is the business table of the tests: one row per run of a
// handler's write, with no unique key, so that a second effect shows.
var effectsDDL = "CREATE TABLE IF NOT EXISTS " + table("effects") + " (consumer text NOT NULL, message_id text NOT NULL, payload bytea)"

// newInbox returns an inbox in the test schema, with its table and the
// effects table created.
func newInbox(t testing.TB, pool *pgxpool.Pool) *inbox.Inbox {
	t.Helper()
	ib, err := inbox.New(pool, inbox.WithSchema(testSchema), inbox.WithPruneBatch(1000))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ib.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, effectsDDL); err != nil {
		t.Fatal(err)
	}
	return ib
}

// effect is a TxHandler that writes one effects row for consumer and
// counts its runs in calls.
func effect(consumer string, calls *atomic.Int32) inbox.TxHandler {
	return func(ctx context.Context, tx pgx.Tx, m *relay.Message) ([]*relay.Message, error) {
		calls.Add(1)
		_, err := tx.Exec(ctx, "INSERT INTO "+table("effects")+" (consumer, message_id, payload) VALUES ($1, $2, $3)", consumer, m.ID, m.Payload)
		return []*relay.Message{{ID: "out-" + m.ID}}, err
	}
}

// count runs a count(*) query.
func count(t testing.TB, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// rows returns how many effects rows and inbox rows consumer has for id.
func rows(t testing.TB, pool *pgxpool.Pool, consumer, id string) (effects, recorded int) {
	t.Helper()
	return count(t, pool, "SELECT count(*) FROM "+table("effects")+" WHERE consumer = $1 AND message_id = $2", consumer, id),
		count(t, pool, "SELECT count(*) FROM "+table("inbox")+" WHERE consumer = $1 AND message_id = $2", consumer, id)
}

func unique(prefix string) string { return prefix + "-" + relay.NewID() }

var errBoom = errors.New("boom")

// waitFor polls cond until it holds, failing after 30s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
