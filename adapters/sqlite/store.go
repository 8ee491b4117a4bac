package sqlite

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
)

// SchemaSQL is the DDL of relay's tables, as shipped in schema.sql: the
// adapter runs exactly this text when a process first opens a file. Run
// it yourself to create the tables ahead, e.g. before the first
// PublishTx in a database relay has not opened yet.
//
//go:embed schema.sql
var SchemaSQL string

// store is a process's handle on one database file, shared by every
// publisher and subscriber of the file (see File).
type store struct {
	path string // absolute
	file File
	refs int
	// w is the one writing connection: the writes of the process queue
	// for it in Go instead of polling SQLite's lock, and its transactions
	// begin IMMEDIATE (they hold the write lock from their first
	// statement, so two processes never claim one row).
	w *sql.DB
	// r reads without taking the write lock (WAL): lag, history, the
	// next due row.
	r *sql.DB
	// waiters wakes the subscriptions of the process for a topic.
	waiters rowqueue.Waiters
}

var stores = struct {
	sync.Mutex
	m map[string]*store
}{m: map[string]*store{}}

// openStore returns the store of f.Path, opening the file and creating
// relay's tables when it is the process's first. ctx bounds that.
func openStore(ctx context.Context, f File) (*store, error) {
	path, err := filepath.Abs(f.Path)
	if err != nil {
		return nil, fmt.Errorf("relay/sqlite: %s: %w", f.Path, err)
	}
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	stores.Lock()
	defer stores.Unlock()
	if s := stores.m[path]; s != nil {
		if s.file.BusyTimeout != f.BusyTimeout || s.file.Synchronous != f.Synchronous {
			return nil, fmt.Errorf("relay/sqlite: %s is open in this process with busy_timeout=%v synchronous=%s; open it with the same settings",
				path, s.file.BusyTimeout, s.file.Synchronous)
		}
		s.refs++
		return s, nil
	}
	s := &store{path: path, file: f, refs: 1}
	if s.w, err = openDB(path, f, "&_txlock=immediate"); err == nil {
		s.r, err = openDB(path, f, "&_pragma=query_only(1)")
	}
	if err == nil {
		s.w.SetMaxOpenConns(1)
		err = s.ensureSchema(ctx)
	}
	if err != nil {
		s.closeDBs()
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CANTOPEN {
			return nil, fmt.Errorf("relay/sqlite: opening %s: %w (does its directory exist, and may this process write there?)", path, err)
		}
		return nil, fmt.Errorf("relay/sqlite: opening %s: %w", path, err)
	}
	stores.m[path] = s
	return s, nil
}

// openDB opens a pool on path in WAL mode with f's settings; extra adds
// DSN parameters.
func openDB(path string, f File, extra string) (*sql.DB, error) {
	dsn := (&url.URL{Scheme: "file", Path: path}).String() +
		"?_pragma=busy_timeout(" + strconv.FormatInt(f.BusyTimeout.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(" + f.Synchronous + ")" + extra
	return sql.Open("sqlite", dsn)
}

// ensureSchema runs SchemaSQL in one write transaction, so that processes
// opening a new file together do not race.
func (s *store) ensureSchema(ctx context.Context) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit: a no-op
	if _, err := tx.ExecContext(ctx, SchemaSQL); err != nil {
		return fmt.Errorf("creating relay's tables: %w", err)
	}
	return tx.Commit()
}

// release drops a reference; the last one closes the file.
func (s *store) release() {
	stores.Lock()
	defer stores.Unlock()
	if s.refs--; s.refs > 0 {
		return
	}
	delete(stores.m, s.path)
	s.closeDBs()
}

func (s *store) closeDBs() {
	for _, db := range []*sql.DB{s.r, s.w} {
		if db != nil {
			_ = db.Close()
		}
	}
}

// write runs fn in one IMMEDIATE transaction on the writing connection and
// commits it. ctx bounds the wait for the write lock, which is where a
// transaction waits on other processes, and ends the transaction between
// statements; fn's statements run with a ctx without cancellation, which
// spares modernc a watcher goroutine per statement (a statement inside
// the transaction holds the lock already and waits on nobody).
func (s *store) write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(context.WithoutCancel(ctx), tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// retryable reports whether err is worth another attempt: the lock held by
// another process past busy_timeout, rather than a statement SQLite
// rejected or a full disk.
func retryable(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// classify marks what retryable finds as driver.Retryable.
func classify(err error) error {
	if retryable(err) {
		return driver.Retryable(err)
	}
	return err
}
