package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestOutboxDelayed: a delayed message written by PublishTx and
// PublishSQLTx in a transaction that began well before the publish is not
// delivered before its DeliverAt (the delay counts from the insert, not
// from the transaction's start), and is delivered after it, without its
// DeliverAt. The subscriber polls only once an hour: it must wake for the
// due time by itself.
func TestOutboxDelayed(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	db, err := sql.Open("pgx", pgURLPlain(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ob := postgres.Outbox{Schema: testSchema}
	topic, group := relaytest.Unique("outbox-delay"), relaytest.Unique("g")
	sub := openSub(t, group, "poll", "1h")
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	const late = 700 * time.Millisecond // the transactions' age at publish

	viaPgx := relay.NewMessage([]byte("pgx"))
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		time.Sleep(late)
		return ob.PublishTx(ctx, tx, topic, viaPgx.DeliverAfter(time.Second))
	})
	if err != nil {
		t.Fatal(err)
	}
	viaSQL := relay.NewMessage([]byte("sql"))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(late)
	if err := ob.PublishSQLTx(ctx, tx, topic, viaSQL.DeliverAfter(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	want := map[string]*relay.Message{viaPgx.ID: viaPgx, viaSQL.ID: viaSQL}
	for range 2 {
		got := next(t, ch)
		at := time.Now()
		w, ok := want[got.ID]
		if !ok {
			t.Fatalf("unexpected message %s %q", got.ID, got.Payload)
		}
		delete(want, got.ID)
		if early := w.DeliverAt.Sub(at); early > 2*time.Millisecond {
			t.Errorf("%q delivered %v before its DeliverAt", got.Payload, early)
		}
		if !got.DeliverAt.IsZero() || string(got.Payload) != string(w.Payload) {
			t.Errorf("delivered %q with DeliverAt %v, want %q and zero", got.Payload, got.DeliverAt, w.Payload)
		}
		if err := got.Ack(); err != nil {
			t.Fatal(err)
		}
	}
}

func BenchmarkDelayLateness(b *testing.B) {
	drivertest.BenchmarkDelayLateness(b, drivertest.Harness{
		NewPublisher:  func(t testing.TB) relay.Publisher { return openPub(t) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return openSub(t, group) },
	})
}
