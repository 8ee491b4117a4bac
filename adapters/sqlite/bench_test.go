package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
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
	b.Run("publish/batch=100", func(b *testing.B) { relaytest.CompareRates(b, 5, relayPublishRate, rawPublishRate) })
	b.Run("consume-ack/window=256", func(b *testing.B) { relaytest.CompareRates(b, 5, relayConsumeRate, rawConsumeRate) })
}

const (
	benchBatch  = 100
	benchWindow = 256
)

// benchFile is a fresh database with relay's tables and a topic with
// one group, and a raw handle on it (see rawOn).
func benchFile(b *testing.B) (base string, raw relaytest.SQLiteRaw, topic, group string) {
	base = dbURL(b)
	openPub(b, base) // creates the tables
	raw, topic, group = rawOn(b, base)
	return base, raw, topic, group
}

// rawOn opens a raw handle on the file of base as a program would: one
// writing connection, WAL, synchronous=full, IMMEDIATE transactions; and
// makes a topic with one group.
func rawOn(b *testing.B, base string) (raw relaytest.SQLiteRaw, topic, group string) {
	db, err := sql.Open("sqlite", "file:"+filePath(b, base)+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(full)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { _ = db.Close() })
	raw = relaytest.SQLiteRaw{DB: db}
	topic, group = relaytest.Unique("bench"), "g"
	if err := raw.AddGroup(topic, group); err != nil {
		b.Fatal(err)
	}
	return raw, topic, group
}

func rawPublish(b *testing.B, raw relaytest.SQLiteRaw, topic string, n int) {
	payload := make([]byte, 100)
	for done := 0; done < n; done += benchBatch {
		if err := raw.Publish(topic, min(benchBatch, n-done), payload); err != nil {
			b.Fatal(err)
		}
	}
}

func relayPublishRate(b *testing.B, n int) float64 {
	base, _, topic, _ := benchFile(b)
	return relaytest.PublishRate(b, openPub(b, base), topic, n, benchBatch, make([]byte, 100))
}

func rawPublishRate(b *testing.B, n int) float64 {
	_, raw, topic, _ := benchFile(b)
	start := time.Now()
	rawPublish(b, raw, topic, n)
	return float64(n) / time.Since(start).Seconds()
}

func relayConsumeRate(b *testing.B, n int) float64 {
	return relayConsumeRateWith(b, n, "inflight", strconv.Itoa(benchWindow))
}

// relayConsumeRateWith is relayConsumeRate with the subscriber URL's
// parameters besides group=.
func relayConsumeRateWith(b *testing.B, n int, params ...string) float64 {
	base, raw, topic, group := benchFile(b)
	rawPublish(b, raw, topic, n)
	return relaytest.ConsumeRate(b, openSub(b, base, group, params...), topic, n)
}

func rawConsumeRate(b *testing.B, n int) float64 { return rawClaimRate(b, n, benchWindow) }

// rawClaimRate is the raw consume of n messages in claims of up to
// window rows.
func rawClaimRate(b *testing.B, n, window int) float64 {
	_, raw, topic, group := benchFile(b)
	rawPublish(b, raw, topic, n)
	start := time.Now()
	if err := raw.Drain(context.Background(), topic, group, n, window); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkLatency measures one message in flight (publish, receive, ack,
// repeat) through relay and through database/sql doing the same work with
// BenchmarkRatio's statements, on one file: the insert in one
// transaction; a claim of one row (at once: the raw loop knows it is
// there); the delete of its rows in one transaction. Idle and under a
// steady load of 2,000 msg/s through relay on another topic of the file:
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
		// The same file as relay's loop and the load.
		raw, topic, group := rawOn(b, base)
		payload := make([]byte, 100)
		rt := func(ctx context.Context) error {
			if err := raw.Publish(topic, 1, payload); err != nil {
				return err
			}
			ids, err := raw.ClaimAcking(topic, group, nil, 1)
			if err != nil || len(ids) != 1 {
				return fmt.Errorf("claimed %d rows (%v), want 1", len(ids), err)
			}
			_, err = raw.ClaimAcking(topic, group, ids, 0)
			return err
		}
		return rt, func() {}
	}
	drivertest.BenchmarkLatency(b, h, raw, drivertest.LatencyOptions{})
}

// BenchmarkDelayLateness: see drivertest.BenchmarkDelayLateness.
//
//	go test -run '^$' -bench DelayLateness -benchtime 200x ./adapters/sqlite/
func BenchmarkDelayLateness(b *testing.B) {
	base := dbURL(b)
	drivertest.BenchmarkDelayLateness(b, drivertest.Harness{
		NewPublisher:  func(t testing.TB) relay.Publisher { return openPub(t, base) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return openSub(t, base, group) },
	})
}
