package sqlite_test

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m)
}

// dbURL is a sqlite:// URL of a fresh database file in t's temporary
// directory, with the parameters kv.
func dbURL(t testing.TB, kv ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.db")
	return testenv.WithParams((&url.URL{Scheme: "sqlite", Path: path}).String(), kv...)
}

// groupURL returns the subscriber URL of a group on base.
func groupURL(base string) func(group string) string {
	return func(group string) string { return testenv.WithParams(base, "group", group) }
}

// filePath is the database file of a dbURL.
func filePath(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host + u.Path
}

// rawDB opens the file of raw with modernc's driver directly, as an
// application does, closed at cleanup.
func rawDB(t testing.TB, raw string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filePath(t, raw)+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openPub(t testing.TB, raw string) relay.Publisher {
	t.Helper()
	p, err := relay.OpenPublisher(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func openSub(t testing.TB, raw, group string, kv ...string) relay.Subscriber {
	t.Helper()
	s, err := relay.OpenSubscriber(context.Background(), testenv.WithParams(raw, append([]string{"group", group}, kv...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// subscribe is relaytest.Subscribe's channel.
func subscribe(t testing.TB, s relay.Subscriber, topic string) <-chan *relay.Message {
	t.Helper()
	ch, _ := relaytest.Subscribe(t, s, topic)
	return ch
}

func count(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
