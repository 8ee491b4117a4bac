package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkRatio compares relay with pgx doing the same work by hand on
// the same server in the same run (relaytest.PublishConsumeRatio): the
// raw side publishes each batch in one transaction with one insert per
// message and a NOTIFY, and consumes by claiming with SKIP LOCKED, then
// deleting the delivery rows and the message rows of each batch. Use a
// fixed count, e.g. -benchtime 20000x.
func BenchmarkRatio(b *testing.B) {
	relaytest.PublishConsumeRatio(b, relayPublishRate, rawPublishRate, relayConsumeRate, rawConsumeRate)
}

// The statements a hand-written pgx program would use on relay's tables.
func sqlFor(q string) string {
	return strings.ReplaceAll(q, "S.", pgx.Identifier{testSchema}.Sanitize()+".")
}

var (
	rawInsert = sqlFor(`WITH m AS (
	INSERT INTO S.messages (topic, relay_id, key, md_keys, md_values, payload)
	SELECT $1, $2, '', '{}', '{}', $3 WHERE EXISTS (SELECT 1 FROM S.groups WHERE topic = $1)
	RETURNING id)
INSERT INTO S.deliveries (topic, group_name, message_id)
SELECT $1, g.name, m.id FROM m, S.groups g WHERE g.topic = $1`)
	rawClaim = sqlFor(`WITH c AS (
	SELECT ctid FROM S.deliveries
	WHERE topic = $1 AND group_name = $2 AND visible_at <= now()
	ORDER BY message_id LIMIT $3 FOR UPDATE SKIP LOCKED),
u AS (
	UPDATE S.deliveries d SET visible_at = now() + interval '30 seconds', attempts = d.attempts + 1, lease_holder = 'raw'
	WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM c))
	RETURNING d.message_id, d.attempts)
SELECT u.message_id, u.attempts, m.relay_id, m.key, m.md_keys, m.md_values, m.payload
FROM u JOIN S.messages m ON m.id = u.message_id ORDER BY u.message_id`)
	rawAck     = sqlFor(`DELETE FROM S.deliveries WHERE topic = $1 AND group_name = $2 AND message_id = ANY($3)`)
	rawCleanup = sqlFor(`DELETE FROM S.messages m WHERE m.id = ANY($1)
	AND NOT EXISTS (SELECT 1 FROM S.deliveries d WHERE d.message_id = m.id AND d.message_id = ANY($1))`)
	rawGroup = sqlFor(`INSERT INTO S.groups (topic, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`)
)

// analyze refreshes the planner's statistics of relay's tables outside
// the timed part: with stale ones (tables that just grew from empty) both
// sides run ten times slower until autovacuum catches up, whichever round
// that happens to hit.
func analyze(b *testing.B, pool *pgxpool.Pool) {
	for _, t := range []string{"groups", "messages", "deliveries"} {
		if _, err := pool.Exec(context.Background(), "ANALYZE "+table(t)); err != nil {
			b.Fatal(err)
		}
	}
}

func rawPublish(b *testing.B, pool *pgxpool.Pool, topic string, n int) {
	ctx := context.Background()
	payload := make([]byte, 100)
	for done := 0; done < n; done += relaytest.RatioBatch {
		batch := &pgx.Batch{}
		for range min(relaytest.RatioBatch, n-done) {
			batch.Queue(rawInsert, topic, relay.NewID(), payload)
		}
		batch.Queue(`SELECT pg_notify($1, $2)`, "relay_"+testSchema, topic)
		if err := pool.SendBatch(ctx, batch).Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// provisioned makes a fresh topic with one group, so that publishing
// stores messages on both sides.
func provisioned(b *testing.B, pool *pgxpool.Pool) (topic, group string) {
	topic, group = relaytest.Unique("bench"), relaytest.Unique("g")
	if _, err := pool.Exec(context.Background(), rawGroup, topic, group); err != nil {
		b.Fatal(err)
	}
	return topic, group
}

func relayPublishRate(b *testing.B, n int) float64 {
	pub := openPub(b)
	topic, _ := provisioned(b, rawPool(b))
	return relaytest.PublishRate(b, pub, topic, n, relaytest.RatioBatch, make([]byte, 100))
}

func rawPublishRate(b *testing.B, n int) float64 {
	pool := rawPool(b)
	openPub(b) // creates the schema
	topic, _ := provisioned(b, pool)
	start := time.Now()
	rawPublish(b, pool, topic, n)
	return float64(n) / time.Since(start).Seconds()
}

func relayConsumeRate(b *testing.B, n int) float64 {
	return relayConsumeRateWith(b, n, "inflight", fmt.Sprint(relaytest.RatioWindow))
}

// relayConsumeRateWith is relayConsumeRate with the subscriber URL's
// parameters besides group=.
func relayConsumeRateWith(b *testing.B, n int, params ...string) float64 {
	pool := rawPool(b)
	openPub(b)
	topic, group := provisioned(b, pool)
	rawPublish(b, pool, topic, n)
	analyze(b, pool)
	return relaytest.ConsumeRate(b, openSub(b, group, params...), topic, n)
}

func rawConsumeRate(b *testing.B, n int) float64 { return rawClaimRate(b, n, relaytest.RatioWindow) }

// rawClaimRate is pgx's consume of n messages: claims of up to window
// deliveries, each batch acked with one statement.
func rawClaimRate(b *testing.B, n, window int) float64 {
	ctx := context.Background()
	pool := rawPool(b)
	openPub(b)
	topic, group := provisioned(b, pool)
	rawPublish(b, pool, topic, n)
	analyze(b, pool)
	start := time.Now()
	for got := 0; got < n; {
		rows, err := pool.Query(ctx, rawClaim, topic, group, window)
		if err != nil {
			b.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var (
				id               int64
				attempts         int
				rid, key         string
				mdKeys, mdValues []string
				payload          []byte
			)
			if err := rows.Scan(&id, &attempts, &rid, &key, &mdKeys, &mdValues, &payload); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		if len(ids) == 0 {
			b.Fatalf("claimed nothing after %d of %d", got, n)
		}
		if _, err := pool.Exec(ctx, rawAck, topic, group, ids); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, rawCleanup, ids); err != nil {
			b.Fatal(err)
		}
		got += len(ids)
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkLatency measures one message in flight (publish, receive, ack,
// repeat) through relay and through pgx doing the same work with
// BenchmarkRatio's statements: the insert and a NOTIFY in one implicit
// transaction; a claim of one delivery with SKIP LOCKED (at once, without
// waiting for the notification); the delete of the delivery row and of the
// message row in one batch. Idle and under a steady load of 2,000 msg/s on
// another topic:
//
//	go test -run '^$' -bench Latency -benchtime 2000x ./adapters/postgres/
func BenchmarkLatency(b *testing.B) {
	h := drivertest.Harness{
		NewTopic:      func(testing.TB) string { return relaytest.Unique("bench-latency") },
		NewPublisher:  func(t testing.TB) relay.Publisher { return openPub(t) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return openSub(t, group) },
	}
	raw := func(b *testing.B, topic string) (drivertest.RoundTrip, func()) {
		pool := rawPool(b)
		openPub(b) // creates the schema
		group := relaytest.Unique("g")
		if _, err := pool.Exec(context.Background(), rawGroup, topic, group); err != nil {
			b.Fatal(err)
		}
		payload := make([]byte, 100)
		rt := func(ctx context.Context) error {
			id := relay.NewID()
			batch := &pgx.Batch{}
			batch.Queue(rawInsert, topic, id, payload)
			batch.Queue(`SELECT pg_notify($1, $2)`, "relay_"+testSchema, topic)
			if err := pool.SendBatch(ctx, batch).Close(); err != nil {
				return err
			}
			var (
				mid              int64
				attempts         int
				rid, key         string
				mdKeys, mdValues []string
				body             []byte
			)
			if err := pool.QueryRow(ctx, rawClaim, topic, group, 1).Scan(&mid, &attempts, &rid, &key, &mdKeys, &mdValues, &body); err != nil {
				return err
			}
			if rid != id {
				return fmt.Errorf("claimed %s, want %s", rid, id)
			}
			ack := &pgx.Batch{}
			ack.Queue(rawAck, topic, group, []int64{mid})
			ack.Queue(rawCleanup, []int64{mid})
			return pool.SendBatch(ctx, ack).Close()
		}
		return rt, func() {}
	}
	drivertest.BenchmarkLatency(b, h, raw, drivertest.LatencyOptions{})
}
