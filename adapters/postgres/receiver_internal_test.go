package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// TestSettleWakesWaitingReceive: acks that Settle keeps for the next
// claim reach the database while Receive waits for messages (with
// polling practically off), because Settle wakes it.
func TestSettleWakesWaitingReceive(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := "relay_test_" + strings.ToLower(strings.ReplaceAll(relay.NewID(), "-", "")[20:])
	defer func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}()
	sub, err := NewSubscriber(ctx, pool, SubscriberConfig{Group: "g", Schema: schema, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	rcv, err := sub.(*driver.Subscriber).Driver().Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	r := rcv.(*rowqueue.Receiver)
	q := sub.(*driver.Subscriber).Driver().(*subDriver).q
	// Inserted without a NOTIFY, so that only Settle can wake Receive.
	if _, err := pool.Exec(ctx, q.insert, toRow(relay.NewMessage([]byte("x"))).args("t")...); err != nil {
		t.Fatal(err)
	}
	got, err := r.Receive(ctx, 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("Receive: %d messages, %v; want 1", len(got), err)
	}

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := r.Receive(rctx, 10)
		done <- err
	}()
	waitUntil(t, "waiting Receive", r.Waiting)
	if err := r.Settle(ctx, []driver.Settle{{Handle: got[0].Handle, Ack: true}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "removal of the ack's rows", func() bool {
		var n int
		if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+pgx.Identifier{schema, "deliveries"}.Sanitize()+
			") + (SELECT count(*) FROM "+pgx.Identifier{schema, "messages"}.Sanitize()+")").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive returned %v after its ctx was cancelled", err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
