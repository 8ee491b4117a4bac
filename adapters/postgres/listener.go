package postgres

import (
	"context"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/go-relay/relay/internal/backoff"
)

// listener holds one connection per subscriber that LISTENs on the
// schema's channel and wakes the subscriptions of the notified topic.
// After (re)connecting it wakes every subscription, since notifications
// sent meanwhile are lost.
type listener struct {
	cfg     *pgx.ConnConfig
	dials   *dialTracker
	listen  string
	log     *slog.Logger
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	err     error // the connection problem while not listening
	waiters map[string]map[chan struct{}]struct{}
}

func startListener(cfg *pgx.ConnConfig, q *queries, log *slog.Logger) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{cfg: cfg, dials: track(&cfg.Config), listen: q.listenOn, log: log, cancel: cancel, done: make(chan struct{}),
		waiters: map[string]map[chan struct{}]struct{}{}}
	go l.run(ctx)
	return l
}

// add registers c to be signalled for topic.
func (l *listener) add(topic string, c chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiters[topic] == nil {
		l.waiters[topic] = map[chan struct{}]struct{}{}
	}
	l.waiters[topic][c] = struct{}{}
}

func (l *listener) remove(topic string, c chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waiters[topic], c)
	if len(l.waiters[topic]) == 0 {
		delete(l.waiters, topic)
	}
}

// wake signals topic's subscriptions, or all of them for "".
func (l *listener) wake(topic string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for t, cs := range l.waiters {
		if topic != "" && t != topic {
			continue
		}
		for c := range cs {
			signal(c)
		}
	}
}

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
		conn, err := pgx.ConnectConfig(ctx, l.cfg)
		if err == nil {
			if _, err = conn.Exec(ctx, l.listen); err != nil {
				closeConn(conn)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.setErr(err)
			l.log.Warn("relay/postgres: LISTEN connection failed; subscriptions poll meanwhile", "err", err)
			bo.Sleep(ctx)
			continue
		}
		l.setErr(nil)
		bo.Reset()
		l.wake("")
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				if ctx.Err() == nil {
					l.setErr(err)
					l.log.Warn("relay/postgres: LISTEN connection lost; reconnecting", "err", err)
				}
				break
			}
			l.wake(n.Payload)
		}
		closeConn(conn)
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

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
