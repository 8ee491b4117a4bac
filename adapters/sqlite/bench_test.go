package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/relaytest"
)

// BenchmarkRatio compares relay with database/sql and modernc.org/sqlite
// doing the same work by hand on relay's tables, on files of the same
// disk in the same run, alternating in rounds (relay first in even
// rounds, raw first in odd ones) over b.N messages each, each round on a
// fresh file, and reports the median rate of each side and their ratio.
// Use a fixed count, e.g. -benchtime 20000x. 100-byte payloads, the
// default synchronous=full; publish in batches of 100 (one IMMEDIATE
// transaction: per message the message row and its delivery row);
// consume with a window of 256 (one transaction per window: delete the
// previous window's delivery and message rows, select the claimable
// rows, lease them).
func BenchmarkRatio(b *testing.B) {
	const rounds = 5
	compare := func(b *testing.B, relayRate, rawRate func(b *testing.B, n int) float64) {
		relaytest.CompareRates(b, rounds, relayRate, rawRate)
	}
	b.Run("publish/batch=100", func(b *testing.B) { compare(b, relayPublishRate, rawPublishRate) })
	b.Run("consume-ack/window=256", func(b *testing.B) { compare(b, relayConsumeRate, rawConsumeRate) })
}

const (
	benchBatch  = 100
	benchWindow = 256
)

// The statements a hand-written program would use on relay's tables.
const (
	rawMessage  = `INSERT INTO relay_messages (topic, relay_id, key, metadata, payload, created_at) VALUES (?, ?, '', '{}', ?, ?)`
	rawDelivery = `INSERT INTO relay_deliveries (topic, group_name, message_id, visible_at) SELECT topic, name, ?2, ?3 FROM relay_groups WHERE topic = ?1`
	rawClaim    = `SELECT d.message_id, d.attempts, m.relay_id, m.key, m.metadata, m.payload
FROM relay_deliveries d JOIN relay_messages m ON m.id = d.message_id
WHERE d.topic = ?1 AND d.group_name = ?2 AND d.visible_at <= ?3 ORDER BY d.message_id LIMIT ?4`
	rawLease = `UPDATE relay_deliveries SET visible_at = ?4, attempts = attempts + 1, lease_holder = 'raw'
WHERE topic = ?1 AND group_name = ?2 AND message_id IN (SELECT value FROM json_each(?3))`
	rawAck     = `DELETE FROM relay_deliveries WHERE topic = ?1 AND group_name = ?2 AND message_id IN (SELECT value FROM json_each(?3))`
	rawCleanup = `DELETE FROM relay_messages WHERE id IN (SELECT value FROM json_each(?1))
AND NOT EXISTS (SELECT 1 FROM relay_deliveries d WHERE d.message_id = relay_messages.id)`
)

// benchFile is a fresh database with relay's tables and a topic with
// one group, and a raw handle on it as a program would open it: one
// writing connection, WAL, synchronous=full, IMMEDIATE transactions.
func benchFile(b *testing.B) (base string, db *sql.DB, topic, group string) {
	base = dbURL(b)
	openPub(b, base) // creates the tables
	db, err := sql.Open("sqlite", "file:"+filePath(b, base)+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(full)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { _ = db.Close() })
	topic, group = relaytest.Unique("bench"), "g"
	if _, err := db.Exec(`INSERT INTO relay_groups (topic, name, created_at) VALUES (?, ?, 0)`, topic, group); err != nil {
		b.Fatal(err)
	}
	return base, db, topic, group
}

// inTx runs fn in one transaction of db and commits it.
func inTx(b *testing.B, db *sql.DB, fn func(tx *sql.Tx) error) {
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	if err := fn(tx); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

func rawPublish(b *testing.B, db *sql.DB, topic string, n int) {
	payload := make([]byte, 100)
	for done := 0; done < n; done += benchBatch {
		inTx(b, db, func(tx *sql.Tx) error {
			msg, err := tx.Prepare(rawMessage)
			if err != nil {
				return err
			}
			defer msg.Close()
			del, err := tx.Prepare(rawDelivery)
			if err != nil {
				return err
			}
			defer del.Close()
			now := time.Now().UnixMicro()
			for range min(benchBatch, n-done) {
				res, err := msg.Exec(topic, relay.NewID(), payload, now)
				if err != nil {
					return err
				}
				id, err := res.LastInsertId()
				if err != nil {
					return err
				}
				if _, err := del.Exec(topic, id, now); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

func relayPublishRate(b *testing.B, n int) float64 {
	ctx := context.Background()
	base, _, topic, _ := benchFile(b)
	pub := openPub(b, base)
	payload := make([]byte, 100)
	batch := make([]*relay.Message, benchBatch)
	start := time.Now()
	for done := 0; done < n; done += benchBatch {
		k := min(benchBatch, n-done)
		for j := range batch[:k] {
			batch[j] = relay.NewMessage(payload)
		}
		if err := pub.Publish(ctx, topic, batch[:k]...); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

func rawPublishRate(b *testing.B, n int) float64 {
	_, db, topic, _ := benchFile(b)
	start := time.Now()
	rawPublish(b, db, topic, n)
	return float64(n) / time.Since(start).Seconds()
}

func relayConsumeRate(b *testing.B, n int) float64 {
	base, db, topic, group := benchFile(b)
	rawPublish(b, db, topic, n)
	sub := openSub(b, base, group, "inflight", strconv.Itoa(benchWindow))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	for range n {
		if err := (<-ch).Ack(); err != nil {
			b.Fatal(err)
		}
	}
	cancel()
	for range ch { // closed once every ack is in the database
	}
	return float64(n) / time.Since(start).Seconds()
}

// jsonIDs is ids as a JSON array.
func jsonIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// rawClaimAcking deletes the rows of acked and claims up to max rows in
// one transaction, returning the ids and relay IDs claimed.
func rawClaimAcking(b *testing.B, db *sql.DB, topic, group string, acked []int64, max int) (ids []int64, rids []string) {
	inTx(b, db, func(tx *sql.Tx) error {
		if len(acked) > 0 {
			list := jsonIDs(acked)
			if _, err := tx.Exec(rawAck, topic, group, list); err != nil {
				return err
			}
			if _, err := tx.Exec(rawCleanup, list); err != nil {
				return err
			}
		}
		now := time.Now()
		rows, err := tx.Query(rawClaim, topic, group, now.UnixMicro(), max)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id, attempts int64
				rid, key, md sql.NullString
				payload      []byte
			)
			if err := rows.Scan(&id, &attempts, &rid, &key, &md, &payload); err != nil {
				return err
			}
			ids, rids = append(ids, id), append(rids, rid.String)
		}
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		_, err = tx.Exec(rawLease, topic, group, jsonIDs(ids), now.Add(30*time.Second).UnixMicro())
		return err
	})
	return ids, rids
}

func rawConsumeRate(b *testing.B, n int) float64 {
	_, db, topic, group := benchFile(b)
	rawPublish(b, db, topic, n)
	start := time.Now()
	var acked []int64
	for got := 0; got < n; {
		ids, _ := rawClaimAcking(b, db, topic, group, acked, benchWindow)
		if len(ids) == 0 {
			b.Fatalf("claimed nothing after %d of %d", got, n)
		}
		acked, got = ids, got+len(ids)
	}
	rawClaimAcking(b, db, topic, group, acked, 0)
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkLatency measures one message in flight (publish, receive, ack,
// repeat) through relay and through database/sql doing the same work with
// BenchmarkRatio's statements: the insert in one transaction; a claim of
// one row (at once: the raw loop knows it is there); the delete of its
// rows in one transaction. Idle and under a steady load of 2,000 msg/s on
// another topic:
//
//	go test -run '^$' -bench Latency -benchtime 2000x ./adapters/sqlite/
func BenchmarkLatency(b *testing.B) {
	base := dbURL(b)
	h := drivertest.Harness{
		NewTopic:      func(testing.TB) string { return relaytest.Unique("bench-latency") },
		NewPublisher:  func(t testing.TB) relay.Publisher { return openPub(t, base) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return openSub(t, base, group) },
	}
	raw := func(b *testing.B, topic string) (drivertest.RoundTrip, func()) {
		_, db, topic, group := benchFile(b)
		rt := func(ctx context.Context) error {
			rawPublish(b, db, topic, 1)
			ids, _ := rawClaimAcking(b, db, topic, group, nil, 1)
			if len(ids) != 1 {
				return fmt.Errorf("claimed %d rows, want 1", len(ids))
			}
			rawClaimAcking(b, db, topic, group, ids, 0)
			return nil
		}
		return rt, func() {}
	}
	drivertest.BenchmarkLatency(b, h, raw, drivertest.LatencyOptions{})
}
