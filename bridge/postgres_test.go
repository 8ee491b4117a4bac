package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres"
	_ "github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// outbox is a PostgreSQL schema of its own for one test (dropped at the
// end), with a pool for writing business rows and events by hand.
type outbox struct {
	url  string // postgres:// URL with schema=
	pool *pgxpool.Pool
	box  postgres.Outbox
}

func newOutbox(t *testing.T) *outbox {
	t.Helper()
	base := testenv.Postgres(t)
	schema := "relay_test_bridge_" + relay.NewID()[24:]
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	return &outbox{url: u.String(), pool: pool, box: postgres.Outbox{Schema: schema}}
}

// provisionGroup creates the schema and group of the source, so that the
// events written before the bridge first runs are kept for it.
func (o *outbox) provisionGroup(t *testing.T, group, topic string) {
	t.Helper()
	sub, err := relay.OpenSubscriber(context.Background(), o.url+"&group="+group)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
}

var errRollback = errors.New("roll back")

// write publishes msgs in one transaction with the outbox, committing it
// or, with rollback, rolling it back.
func (o *outbox) write(t *testing.T, topic string, rollback bool, msgs ...*relay.Message) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), o.pool, func(tx pgx.Tx) error {
		if err := o.box.PublishTx(context.Background(), tx, topic, msgs...); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	if rollback && errors.Is(err, errRollback) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (o *outbox) pending(t *testing.T, topic, group string) int {
	t.Helper()
	var n int
	q := "SELECT count(*) FROM " + pgx.Identifier{o.box.Schema, "deliveries"}.Sanitize() + " WHERE topic = $1 AND group_name = $2"
	if err := o.pool.QueryRow(context.Background(), q, topic, group).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func outboxBridge(t *testing.T, from, to string, topic string, concurrency int) *bridge.Bridge {
	t.Helper()
	br, err := bridge.New(bridge.Config{HTTP: bridge.HTTPConfig{Disabled: true}, Routes: []bridge.Route{{
		Name:        "outbox",
		From:        bridge.Source{URL: from, Topic: topic, Group: "forwarder"},
		To:          bridge.Destination{URL: to, Topic: topic},
		Concurrency: concurrency,
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return br
}

// TestPostgresOutboxSourceAtLeastOnce: a route from postgres:// forwards
// every event of a committed outbox transaction to Redis, byte-exact, and
// none of a rolled-back one; events written while the bridge is stopped
// are forwarded when it runs again, and every forwarded event is acked at
// the source (no delivery row left).
func TestPostgresOutboxSourceAtLeastOnce(t *testing.T) {
	o, dst := newOutbox(t), testenv.Redis(t)
	topic := uniq("outbox")
	o.provisionGroup(t, "forwarder", topic)
	provision(t, dst, "reader", topic)

	mk := func(i int) *relay.Message {
		m := relay.NewMessage([]byte("event " + strconv.Itoa(i)))
		m.Key = "order-" + strconv.Itoa(i%3)
		m.Metadata = relay.Metadata{"n": strconv.Itoa(i)}
		return m
	}
	var want []*relay.Message
	for i := range 10 {
		m := mk(i)
		o.write(t, topic, false, m)
		want = append(want, m)
	}
	rolledBack := mk(100)
	o.write(t, topic, true, rolledBack)

	stop := runBridge(t, outboxBridge(t, o.url, dst, topic, 0))
	got := consume(t, dst, "reader", topic, 10)
	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	// Written while no bridge runs: kept for the forwarder's group.
	for i := 10; i < 20; i++ {
		m := mk(i)
		o.write(t, topic, false, m)
		want = append(want, m)
	}
	if n := o.pending(t, topic, "forwarder"); n != 10 {
		t.Fatalf("%d delivery rows while the bridge is stopped, want the 10 new events", n)
	}
	stop = runBridge(t, outboxBridge(t, o.url, dst, topic, 0))
	got = append(got, consume(t, dst, "reader", topic, 10)...)
	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}

	byID := map[string]*relay.Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	if byID[rolledBack.ID] != nil {
		t.Fatalf("the rolled-back event %s was forwarded", rolledBack.ID)
	}
	for _, w := range want {
		g := byID[w.ID]
		if g == nil {
			t.Fatalf("event %s (%s) not forwarded; got %d events", w.ID, w.Payload, len(byID))
		}
		if string(g.Payload) != string(w.Payload) || g.Key != w.Key || g.Metadata["n"] != w.Metadata["n"] {
			t.Errorf("event %s changed: payload %q key %q n %q", w.ID, g.Payload, g.Key, g.Metadata["n"])
		}
	}
	if n := o.pending(t, topic, "forwarder"); n != 0 {
		t.Fatalf("%d delivery rows left at the source after everything was forwarded", n)
	}
}

// TestPostgresOutboxSourceOrderPerKey: with several messages forwarded at
// once (route concurrency 16), the events of each key reach Redis in the
// order their transactions committed.
func TestPostgresOutboxSourceOrderPerKey(t *testing.T) {
	const keys, perKey = 4, 30
	o, dst := newOutbox(t), testenv.Redis(t)
	topic := uniq("outbox-order")
	o.provisionGroup(t, "forwarder", topic)
	provision(t, dst, "reader", topic)
	// Transactions of 1 to 3 events, keys interleaved, committed one
	// after another.
	next := make([]int, keys)
	for total := 0; total < keys*perKey; {
		var tx []*relay.Message
		for range 1 + total%3 {
			k := total % keys
			if next[k] == perKey {
				break
			}
			m := relay.NewMessage([]byte(fmt.Sprintf("%d/%d", k, next[k])))
			m.Key = "key-" + strconv.Itoa(k)
			m.Metadata = relay.Metadata{"seq": strconv.Itoa(next[k])}
			next[k]++
			total++
			tx = append(tx, m)
		}
		o.write(t, topic, false, tx...)
	}

	stop := runBridge(t, outboxBridge(t, o.url, dst, topic, 16))
	got := consume(t, dst, "reader", topic, keys*perKey)
	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	seen := map[string]int{}
	for _, m := range got {
		seq, err := strconv.Atoi(m.Metadata["seq"])
		if err != nil {
			t.Fatalf("message %s has no seq: %v", m.ID, m.Metadata)
		}
		if want := seen[m.Key]; seq != want {
			t.Fatalf("key %s: got seq %d, want %d (out of order or duplicated)", m.Key, seq, want)
		}
		seen[m.Key]++
	}
	for k := range keys {
		if n := seen["key-"+strconv.Itoa(k)]; n != perKey {
			t.Errorf("key-%d: %d events forwarded, want %d", k, n, perKey)
		}
	}
}
