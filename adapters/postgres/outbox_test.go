package postgres_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// checkOutbox runs relaytest.Outbox with write, on a fresh topic and
// group and a business table "orders" in the test schema.
func checkOutbox(t *testing.T, write func(t *testing.T, topic string, m *relay.Message, commit bool)) {
	ctx := context.Background()
	pool := rawPool(t)
	topic, group := relaytest.Unique("outbox"), relaytest.Unique("g")
	sub := openSub(t, group, "poll", "1h") // delivery must come from the commit's NOTIFY
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table("orders")+" (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	rows := func(t *testing.T, query string, arg string) int {
		var n int
		if err := pool.QueryRow(ctx, query, arg).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	relaytest.Outbox(t, sub, topic, relaytest.OutboxCase{
		Write: write,
		MessageRows: func(t *testing.T, id string) int {
			return rows(t, "SELECT count(*) FROM "+table("messages")+" WHERE relay_id = $1", id)
		},
		BusinessRows: func(t *testing.T, key string) int {
			return rows(t, "SELECT count(*) FROM "+table("orders")+" WHERE id = $1", topic+key)
		},
	})
}

func TestOutboxPgx(t *testing.T) {
	pool := rawPool(t)
	ob := postgres.Outbox{Schema: testSchema}
	checkOutbox(t, func(t *testing.T, topic string, m *relay.Message, commit bool) {
		ctx := context.Background()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+table("orders")+" (id) VALUES ($1)", topic+m.Key); err != nil {
				return err
			}
			if err := ob.PublishTx(ctx, tx, topic, m); err != nil {
				return err
			}
			if !commit {
				return errRollback
			}
			return nil
		})
		if commit && err != nil || !commit && err != errRollback {
			t.Fatalf("transaction: %v", err)
		}
	})
}

func TestOutboxDatabaseSQL(t *testing.T) {
	db, err := sql.Open("pgx", pgURLPlain(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ob := postgres.Outbox{Schema: testSchema}
	checkOutbox(t, func(t *testing.T, topic string, m *relay.Message, commit bool) {
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table("orders")+" (id) VALUES ($1)", topic+m.Key); err != nil {
			t.Fatal(err)
		}
		if err := ob.PublishSQLTx(ctx, tx, topic, m); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestOutboxMissingSchema: without relay's tables the error says how to
// create them.
func TestOutboxMissingSchema(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return postgres.Outbox{Schema: "relay_test_missing"}.PublishTx(ctx, tx, "t", relay.NewMessage(nil))
	})
	if err == nil || !contains(err.Error(), "schema.sql") {
		t.Fatalf("err = %v, want one pointing at schema.sql", err)
	}
}
