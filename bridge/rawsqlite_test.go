package bridge_test

import (
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-relay/relay/adapters/sqlite"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// --- SQLite: database/sql with modernc.org/sqlite on relay's tables ---

// sqliteBackend is a fresh database file for the benchmark, and the raw
// program on it (relaytest.SQLiteRaw: the adapter's statements by hand).
func sqliteBackend(b *testing.B) benchBackend {
	path := filepath.Join(b.TempDir(), "bench.db")
	u := (&url.URL{Scheme: "sqlite", Path: path}).String()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(full)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(sqlite.SchemaSQL); err != nil {
		b.Fatal(err)
	}
	return benchBackend{"sqlite", u, withGroup(u), rawSQLite{relaytest.SQLiteRaw{DB: db}}}
}

type rawSQLite struct{ r relaytest.SQLiteRaw }

// prepare creates the group, so that relay's fill keeps the messages.
func (r rawSQLite) prepare(b *testing.B, topic, group string) {
	if err := r.r.AddGroup(topic, group); err != nil {
		b.Fatal(err)
	}
}

// consume: one transaction per window, deleting the previous window's
// rows and leasing the next.
func (r rawSQLite) consume(b *testing.B, topic, group string, window int) rawResult {
	var acked []int64
	var start time.Time
	var busy time.Duration
	got, first := 0, 0
	for got < benchMessages {
		ids, err := r.r.ClaimAcking(topic, group, acked, window)
		if err != nil {
			b.Fatalf("claim after %d of %d: %v", got, benchMessages, err)
		}
		if len(ids) == 0 {
			b.Fatalf("claimed nothing after %d of %d", got, benchMessages)
		}
		if got == 0 {
			start, first, busy = time.Now(), len(ids), machineBusy()
		}
		acked, got = ids, got+len(ids)
	}
	if _, err := r.r.ClaimAcking(topic, group, acked, 0); err != nil {
		b.Fatal(err)
	}
	return rawResult{rate: drainRate(got, first, start), calls: -1, busy: machineBusy() - busy}
}

// publish: one transaction per batch; the workers take turns on the one
// writing connection, as relay's publishers of one process do.
func (r rawSQLite) publish(b *testing.B, topic string, batch, workers int) rawResult {
	payload := make([]byte, benchPayload)
	return rawResult{rate: runParallel(b, batch, workers, func(n int) error { return r.r.Publish(topic, n, payload) }), calls: -1}
}

// drop: the file goes with the benchmark's temporary directory.
func (rawSQLite) drop(string, ...string) {}
