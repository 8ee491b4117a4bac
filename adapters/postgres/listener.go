package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/go-relay/relay/driver/backoff"
	"github.com/go-relay/relay/internal/rowqueue"
)

// listener holds one connection per subscriber that LISTENs on the
// schema's channel and wakes the subscriptions of the notified topic.
// After (re)connecting it wakes every subscription, since notifications
// sent meanwhile are lost.
type listener struct {
	cfg     *pgx.ConnConfig
	dials   *dialTracker
	listen  string
	ping    time.Duration // the keepalive: SubscriberConfig.PingInterval
	log     *slog.Logger
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	err     error // the connection problem while not listening
	waiters rowqueue.Waiters
}

func startListener(cfg *pgx.ConnConfig, q *queries, ping time.Duration, log *slog.Logger) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{cfg: cfg, dials: track(&cfg.Config), listen: q.listenOn, ping: ping, log: log, cancel: cancel, done: make(chan struct{})}
	go l.run(ctx)
	return l
}

// add registers c to be signalled for topic.
func (l *listener) add(topic string, c chan struct{}) { l.waiters.Add(topic, c) }

func (l *listener) remove(topic string, c chan struct{}) { l.waiters.Remove(topic, c) }

// wake signals topic's subscriptions, or all of them for "".
func (l *listener) wake(topic string) { l.waiters.Wake(topic) }

func (l *listener) health() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *listener) setErr(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	var bo backoff.Backoff
	for ctx.Err() == nil {
		var conn *pgx.Conn
		err := bo.Retry(ctx, func() error {
			var err error
			conn, err = pgx.ConnectConfig(ctx, l.cfg)
			if err == nil {
				if _, err = conn.Exec(ctx, l.listen); err != nil {
					closeConn(conn)
				}
			}
			if err != nil && ctx.Err() == nil {
				l.setErr(err)
				l.log.Warn("relay/postgres: LISTEN connection failed; subscriptions poll meanwhile", "err", err)
			}
			return err
		}, nil)
		if err != nil {
			return // ctx is done
		}
		l.setErr(nil)
		l.wake("")
		for {
			n, err := l.next(ctx, conn)
			if err != nil {
				if ctx.Err() == nil {
					l.setErr(err)
					l.log.Warn("relay/postgres: LISTEN connection lost; reconnecting", "err", err)
				}
				break
			}
			l.wake(n)
		}
		closeConn(conn)
	}
}

// next waits for the next notification on conn and returns its payload.
// After l.ping without one it pings the server, and fails when the ping
// is not answered within l.ping either: a silent network otherwise leaves
// the wait blocked until TCP gives up, minutes later.
func (l *listener) next(ctx context.Context, conn *pgx.Conn) (string, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, l.ping)
		n, err := conn.WaitForNotification(wctx)
		idle := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil {
			return n.Payload, nil
		}
		if !idle || !pgconn.Timeout(err) {
			return "", err
		}
		// A wait cut by its deadline leaves the connection usable.
		pctx, cancel := context.WithTimeout(ctx, l.ping)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return "", fmt.Errorf("keepalive ping unanswered after %v: %w", l.ping, err)
		}
	}
}

// closeConn closes conn without waiting long on a server that stopped
// answering.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = conn.Close(ctx)
	// A connection pgx closed itself after an interrupted wait finishes
	// closing in the background; stop cuts it if it takes long.
	<-conn.PgConn().CleanupDone()
}

// stop ends the listener, cuts its connection (see dialTracker) and
// waits for it.
func (l *listener) stop() {
	l.cancel()
	l.dials.cut()
	<-l.done
}
