package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/adapters/postgres/inbox"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// TestRedeliveryRunsOnce: the same message delivered twice (and a copy
// with the same ID) writes the business row once and runs fn once; the
// duplicates succeed without outputs, so the router acks them.
func TestRedeliveryRunsOnce(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	ib := newInbox(t, pool)
	var calls atomic.Int32
	consumer := unique("c")
	h := ib.Handler(consumer, effect(consumer, &calls))

	m := relay.NewMessage([]byte("order 1"))
	out, err := h(ctx, m)
	if err != nil || len(out) != 1 || out[0].ID != "out-"+m.ID {
		t.Fatalf("first delivery: out %v, err %v; want the handler's output", out, err)
	}
	for i, dup := range []*relay.Message{m, m.Copy()} {
		out, err := h(ctx, dup)
		if err != nil || len(out) != 0 {
			t.Fatalf("duplicate %d: out %v, err %v; want no output and no error", i, out, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if e, r := rows(t, pool, consumer, m.ID); e != 1 || r != 1 {
		t.Fatalf("%d effects rows and %d inbox rows, want 1 and 1", e, r)
	}
}

// TestHandlerErrorRollsBack: fn's error is returned and rolls back both
// its write and the inbox row, so that the redelivery runs fn again.
func TestHandlerErrorRollsBack(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	ib := newInbox(t, pool)
	consumer := unique("c")
	var calls atomic.Int32
	write := effect(consumer, &calls)
	h := ib.Handler(consumer, func(ctx context.Context, tx pgx.Tx, m *relay.Message) ([]*relay.Message, error) {
		out, err := write(ctx, tx, m)
		if err == nil && calls.Load() == 1 {
			return nil, errBoom // after the write: it must be rolled back
		}
		return out, err
	})
	m := relay.NewMessage([]byte("x"))
	if _, err := h(ctx, m); !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want the handler's error", err)
	}
	if e, r := rows(t, pool, consumer, m.ID); e != 0 || r != 0 {
		t.Fatalf("after the failure: %d effects rows and %d inbox rows, want none", e, r)
	}
	if _, err := h(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := h(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (the failure and the redelivery)", n)
	}
	if e, r := rows(t, pool, consumer, m.ID); e != 1 || r != 1 {
		t.Fatalf("after the redelivery: %d effects rows and %d inbox rows, want 1 and 1", e, r)
	}
}

// TestConsumersIndependent: two consumer names process the same ID each
// once.
func TestConsumersIndependent(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	ib := newInbox(t, pool)
	a, b := unique("a"), unique("b")
	var callsA, callsB atomic.Int32
	ha, hb := ib.Handler(a, effect(a, &callsA)), ib.Handler(b, effect(b, &callsB))
	m := relay.NewMessage(nil)
	for range 2 {
		for _, h := range []func(context.Context, *relay.Message) ([]*relay.Message, error){ha, hb} {
			if _, err := h(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if callsA.Load() != 1 || callsB.Load() != 1 {
		t.Fatalf("runs: %d of %s, %d of %s; want 1 each", callsA.Load(), a, callsB.Load(), b)
	}
	for _, c := range []string{a, b} {
		if e, r := rows(t, pool, c, m.ID); e != 1 || r != 1 {
			t.Fatalf("%s: %d effects rows and %d inbox rows, want 1 and 1", c, e, r)
		}
	}
}

// TestConcurrentDeliveries: deliveries of one ID running at once (two
// competing consumers that both got it) have one effect; the others wait
// for the first transaction and then succeed without running fn.
func TestConcurrentDeliveries(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	ib := newInbox(t, pool)
	consumer := unique("c")
	var calls atomic.Int32
	write := effect(consumer, &calls)
	inFn := make(chan struct{})
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) }) // also when the test fails early
	h := ib.Handler(consumer, func(ctx context.Context, tx pgx.Tx, m *relay.Message) ([]*relay.Message, error) {
		close(inFn) // a second run would panic here
		<-release   // hold the transaction open while the others arrive
		return write(ctx, tx, m)
	})
	m := relay.NewMessage(nil)
	const n = 4
	errs := make(chan error, n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _, err := h(ctx, m.Copy()); errs <- err }()
	<-inFn
	for range n - 1 {
		wg.Add(1)
		go func() { defer wg.Done(); _, err := h(ctx, m.Copy()); errs <- err }()
	}
	// The others are blocked on the first one's inbox row.
	waitFor(t, "the other deliveries to wait on the inbox row", func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, "INSERT INTO %"+testSchema+"%inbox%") >= n-1
	})
	releaseOnce.Do(func() { close(release) })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
	if e, r := rows(t, pool, consumer, m.ID); e != 1 || r != 1 {
		t.Fatalf("%d effects rows and %d inbox rows, want 1 and 1", e, r)
	}
}

// TestWithOutbox: inbox and PublishTx in one transaction: a message
// delivered twice writes its business row and its follow-up event once,
// and the event is delivered from the outbox.
func TestWithOutbox(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	ib := newInbox(t, pool)
	topic, group, consumer := unique("invoices"), unique("g"), unique("bill")
	sub, err := relay.OpenSubscriber(ctx, testenv.WithParams(testenv.Postgres(t), "schema", testSchema, "group", group))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	write := effect(consumer, &calls)
	ob := postgres.Outbox{Schema: testSchema}
	h := ib.Handler(consumer, func(ctx context.Context, tx pgx.Tx, m *relay.Message) ([]*relay.Message, error) {
		if _, err := write(ctx, tx, m); err != nil {
			return nil, err
		}
		return nil, ob.PublishTx(ctx, tx, topic, &relay.Message{Key: m.ID, Payload: []byte("invoice for " + m.ID)})
	})
	m := relay.NewMessage(nil)
	for range 2 {
		if _, err := h(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if e, r := rows(t, pool, consumer, m.ID); e != 1 || r != 1 || calls.Load() != 1 {
		t.Fatalf("%d effects rows, %d inbox rows, %d runs; want 1 each", e, r, calls.Load())
	}
	if n := count(t, pool, "SELECT count(*) FROM "+table("messages")+" WHERE topic = $1", topic); n != 1 {
		t.Fatalf("%d outbox messages, want 1", n)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ch:
		if got.Key != m.ID || string(got.Payload) != "invoice for "+m.ID {
			t.Fatalf("outbox delivered key %q payload %q", got.Key, got.Payload)
		}
		_ = got.Ack()
	case <-time.After(30 * time.Second):
		t.Fatal("the outbox message was not delivered")
	}
}

// TestDatabaseSQL: the database/sql variant skips duplicates and rolls
// back on error like the pgx one.
func TestDatabaseSQL(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	newInbox(t, pool) // the tables
	db, err := sql.Open("pgx", testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ib, err := inbox.NewSQL(db, inbox.WithSchema(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	consumer := unique("c")
	var calls int
	h := ib.Handler(consumer, func(ctx context.Context, tx *sql.Tx, m *relay.Message) ([]*relay.Message, error) {
		calls++
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table("effects")+" (consumer, message_id) VALUES ($1, $2)", consumer, m.ID); err != nil {
			return nil, err
		}
		if calls == 1 {
			return nil, errBoom
		}
		return nil, nil
	})
	m := relay.NewMessage(nil)
	if _, err := h(ctx, m); !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want the handler's error", err)
	}
	if e, r := rows(t, pool, consumer, m.ID); e != 0 || r != 0 {
		t.Fatalf("after the failure: %d effects rows and %d inbox rows, want none", e, r)
	}
	for range 3 {
		if _, err := h(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if e, r := rows(t, pool, consumer, m.ID); e != 1 || r != 1 || calls != 2 {
		t.Fatalf("%d effects rows, %d inbox rows, %d runs; want 1, 1, 2", e, r, calls)
	}
	n, err := ib.Prune(ctx, time.Hour)
	if err != nil || n != 0 {
		t.Fatalf("Prune of fresh rows: %d, %v; want 0", n, err)
	}
}

// TestPrune deletes exactly the rows older than the age, across several
// batches, and keeps the rest.
func TestPrune(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	ib := newInbox(t, pool)
	consumer := unique("c")
	if _, err := pool.Exec(ctx, "INSERT INTO "+table("inbox")+` (consumer, message_id, processed_at)
SELECT $1, 'm' || i, CASE WHEN i <= 2300 THEN now() - interval '2 hours' ELSE now() END FROM generate_series(1, 2500) i`, consumer); err != nil {
		t.Fatal(err)
	}
	if _, err := ib.Prune(ctx, 0); err == nil {
		t.Fatal("Prune(0) did not fail")
	}
	n, err := ib.Prune(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2300 {
		t.Fatalf("pruned %d rows, want 2300 (three batches of at most 1000)", n)
	}
	if left := count(t, pool, "SELECT count(*) FROM "+table("inbox")+" WHERE consumer = $1", consumer); left != 200 {
		t.Fatalf("%d rows left, want the 200 recent ones", left)
	}
}

// TestErrors: a message without an ID fails permanently without running
// fn; a missing table says how to create it; bad options are refused.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	ib := newInbox(t, pool)
	var calls atomic.Int32
	_, err := ib.Handler("c", effect("c", &calls))(ctx, &relay.Message{})
	if err == nil || !relay.IsPermanent(err) || calls.Load() != 0 {
		t.Fatalf("message without ID: err %v (permanent %v), %d runs", err, relay.IsPermanent(err), calls.Load())
	}
	missing, err := inbox.New(pool, inbox.WithSchema(testSchema+"_missing"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = missing.Handler("c", effect("c", &calls))(ctx, relay.NewMessage(nil))
	if err == nil || !strings.Contains(err.Error(), "EnsureSchema") || calls.Load() != 0 {
		t.Fatalf("missing table: err %v, %d runs; want an error naming EnsureSchema", err, calls.Load())
	}
	for _, opts := range [][]inbox.Option{{inbox.WithSchema("")}, {inbox.WithPruneBatch(0)}} {
		if _, err := inbox.New(pool, opts...); err == nil {
			t.Fatal("invalid option accepted")
		}
	}
	if _, err := inbox.New(nil); err == nil {
		t.Fatal("nil pool accepted")
	}
}
