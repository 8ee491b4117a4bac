package postgres

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// dialTracker wraps a pgconn DialFunc and remembers every connection it
// opened, so that Close can cut them all. pgx closes a connection whose
// query was interrupted in the background, after a cancel request on a
// new connection that it waits on for up to 15s; against a server that
// stopped answering that would hold Close (pgxpool waits for it) and
// leave goroutines behind. Cutting the sockets ends those waits at once.
type dialTracker struct {
	dial pgconn.DialFunc

	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
}

var errDialClosed = errors.New("relay/postgres: the client is closed")

func track(cfg *pgconn.Config) *dialTracker {
	t := &dialTracker{dial: cfg.DialFunc, conns: map[*trackedConn]struct{}{}}
	if t.dial == nil {
		d := &net.Dialer{KeepAlive: 5 * time.Minute}
		t.dial = d.DialContext
	}
	cfg.DialFunc = t.dialContext
	return t
}

func (t *dialTracker) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := t.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		_ = c.Close()
		return nil, errDialClosed
	}
	t.conns[tc] = struct{}{}
	return tc, nil
}

// cut closes every connection still open and refuses new ones.
func (t *dialTracker) cut() {
	t.mu.Lock()
	t.closed = true
	conns := t.conns
	t.conns = map[*trackedConn]struct{}{}
	t.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	t *dialTracker
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}
