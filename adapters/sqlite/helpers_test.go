package sqlite_test

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testenv"
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

func subscribe(t testing.TB, s relay.Subscriber, topic string) <-chan *relay.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := s.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func next(t testing.TB, ch <-chan *relay.Message) *relay.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("subscription channel closed")
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
	}
	return nil
}

func count(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
