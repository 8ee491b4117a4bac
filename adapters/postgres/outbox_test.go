package postgres_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/internal/relaytest"
)

// outboxCase runs a business write and the outbox publish of one message
// in a transaction that commits or rolls back.
type outboxCase func(t *testing.T, topic string, m *relay.Message, commit bool)

// checkOutbox: a message published in a rolled-back transaction is never
// delivered, one published in a committed transaction is, with its ID,
// key, metadata and payload; the business row exists iff committed.
func checkOutbox(t *testing.T, run outboxCase) {
	ctx := context.Background()
	pool := rawPool(t)
	topic, group := relaytest.Unique("outbox"), relaytest.Unique("g")
	sub := openSub(t, group, "poll", "1h") // delivery must come from the commit's NOTIFY
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table("orders")+" (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}

	rolledBack := &relay.Message{Key: "order-1", Payload: []byte("rolled back")}
	run(t, topic, rolledBack, false)
	if rolledBack.ID == "" {
		t.Fatal("PublishTx did not assign an ID")
	}
	committed := &relay.Message{Key: "order-2", Metadata: relay.Metadata{"type": "order.placed"}, Payload: []byte{0, 1, 2, 0xff}}
	run(t, topic, committed, true)

	got := next(t, ch)
	if got.ID != committed.ID || got.Key != "order-2" || got.Metadata["type"] != "order.placed" || string(got.Payload) != string(committed.Payload) {
		t.Fatalf("got %q key %q md %v payload %x, want the committed message %q", got.ID, got.Key, got.Metadata, got.Payload, committed.ID)
	}
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
	// The rolled-back message left no row behind that could ever be claimed.
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table("messages")+" WHERE relay_id = $1", rolledBack.ID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d message rows of the rolled-back message", n)
	}
	for id, want := range map[string]int{rolledBack.Key: 0, committed.Key: 1} {
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table("orders")+" WHERE id = $1", topic+id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("order %s: %d rows, want %d", id, n, want)
		}
	}
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
