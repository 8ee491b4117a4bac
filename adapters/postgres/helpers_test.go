package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// testSchema is this test run's own schema, dropped when the run ends.
var testSchema = "relay_test_" + strings.ToLower(strings.ReplaceAll(relay.NewID(), "-", "")[20:])

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(testenv.ProxyGoroutines(), goleak.Cleanup(func(code int) {
		dropSchema()
		os.Exit(code)
	}))...)
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

// pgURL is the test server with this run's schema.
func pgURL(t testing.TB) string {
	t.Helper()
	return testenv.WithParams(testenv.Postgres(t), "schema", testSchema)
}

// rawPool is a plain pgx pool on the test server, closed at cleanup.
func rawPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// table is the quoted name of one of relay's tables in the test schema.
func table(name string) string { return pgx.Identifier{testSchema, name}.Sanitize() }

func openPub(t testing.TB, kv ...string) relay.Publisher {
	t.Helper()
	return relaytest.OpenPublisher(t, testenv.WithParams(pgURL(t), kv...))
}

func openSub(t testing.TB, group string, kv ...string) relay.Subscriber {
	t.Helper()
	return relaytest.OpenSubscriber(t, testenv.WithParams(pgURL(t), append([]string{"group", group}, kv...)...))
}

func next(t testing.TB, ch <-chan *relay.Message) *relay.Message {
	t.Helper()
	return relaytest.Next(t, ch, "the next message")
}

var errRollback = errors.New("roll back")

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// pgURLPlain is the test server's URL without relay's parameters, for
// plain pgx and database/sql clients.
func pgURLPlain(t testing.TB) string { return testenv.Postgres(t) }

// local is the test server for restarts (see testenv.LocalPostgres).
var local = testenv.LocalPostgres(postgresUp)

func postgresUp() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testenv.URL("RELAY_TEST_POSTGRES_URL", testenv.DefaultPostgresURL))
	if err != nil {
		return false
	}
	defer c.Close(ctx)
	return c.Ping(ctx) == nil
}
