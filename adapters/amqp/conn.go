package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/backoff"
)

// State is the state of a publisher's or subscriber's broker connection.
type State int

const (
	// StateConnected: the connection is open.
	StateConnected State = iota + 1
	// StateReconnecting: the connection was lost; it is being re-established
	// with backoff. Publish calls wait (within their ctx) and subscriptions
	// resume once it is back.
	StateReconnecting
	// StateClosed: Close was called.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateConnected:
		return "connected"
	case StateReconnecting:
		return "reconnecting"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// supervisor owns one AMQP connection and re-establishes it with backoff
// when it drops. Users take the current connection with get; channels
// opened on an old connection fail and their users come back for a new one.
type supervisor struct {
	cfg     *Config
	dialCfg amqp091.Config
	log     *slog.Logger

	frameMax atomic.Int64 // negotiated frame_max of the latest connection

	blockMu     sync.Mutex
	unblocked   chan struct{} // closed while the broker lets us publish
	blockReason string        // the broker's reason while it blocks us

	mu    sync.Mutex
	conn  *amqp091.Connection
	gen   uint64        // increments with every new connection
	ready chan struct{} // closed while conn is usable
	state State

	ctx     context.Context // cancelled by close
	cancel  context.CancelFunc
	closing <-chan struct{} // ctx.Done()
	done    chan struct{}

	// calls counts the goroutines of bounded broker calls; Add happens
	// under mu after a check of closing, so that close can Wait.
	calls sync.WaitGroup
}

// errConnClosed is returned by get after close.
var errConnClosed = fmt.Errorf("relay/amqp: connection closed: %w", relay.ErrClosed)

// connect dials once, bounded by ctx and cfg.ConnectTimeout, and starts
// supervising the connection.
func connect(ctx context.Context, cfg *Config) (*supervisor, error) {
	uri, err := amqp091.ParseURI(cfg.URL)
	if err != nil {
		return nil, &relay.URLError{URL: relay.Redact(cfg.URL), Reason: err.Error()}
	}
	dc := amqp091.Config{
		Heartbeat:  cfg.Heartbeat,
		Properties: amqp091.NewConnectionProperties(),
		Locale:     "en_US",
	}
	if cfg.ConnectionName != "" {
		dc.Properties.SetClientConnectionName(cfg.ConnectionName)
	}
	if uri.Scheme == "amqps" {
		t, err := cfg.tlsConfig(uri.Host)
		if err != nil {
			return nil, err
		}
		dc.TLSClientConfig = t
	}
	s := &supervisor{
		cfg:       cfg,
		dialCfg:   dc,
		log:       cfg.logger().With("backend", "amqp", "broker", relay.Redact(cfg.URL)),
		ready:     make(chan struct{}),
		done:      make(chan struct{}),
		unblocked: closedChan(),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.closing = s.ctx.Done()
	conn, err := s.dial(ctx)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("relay/amqp: connecting to %s: %w", relay.Redact(cfg.URL), err)
	}
	s.install(conn)
	go s.run(conn)
	return s, nil
}

// dial opens one connection. ctx and ConnectTimeout bound the TCP dial and
// the TLS and AMQP handshakes.
func (s *supervisor) dial(ctx context.Context) (*amqp091.Connection, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	dc := s.dialCfg
	var stop func() bool
	var mu sync.Mutex
	dc.Dial = func(network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		deadline, _ := ctx.Deadline()
		if err := c.SetDeadline(deadline); err != nil {
			c.Close()
			return nil, err
		}
		mu.Lock()
		stop = context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
		mu.Unlock()
		return c, nil
	}
	conn, err := amqp091.DialConfig(s.cfg.URL, dc)
	mu.Lock()
	if stop != nil {
		stop()
	}
	mu.Unlock()
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return conn, err
}

func (s *supervisor) install(conn *amqp091.Connection) {
	s.frameMax.Store(int64(conn.Config.FrameSize))
	s.mu.Lock()
	s.conn = conn
	s.gen++
	close(s.ready)
	s.mu.Unlock()
	s.setState(StateConnected)
}

func (s *supervisor) setState(st State) {
	s.mu.Lock()
	changed := s.state != st
	s.state = st
	s.mu.Unlock()
	if changed && s.cfg.OnStateChange != nil {
		s.cfg.OnStateChange(st)
	}
}

// State reports the connection state.
func (s *supervisor) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// run watches the current connection and replaces it when it drops.
func (s *supervisor) run(conn *amqp091.Connection) {
	defer close(s.done)
	bo := backoff.Backoff{Initial: s.cfg.ReconnectMin, Max: s.cfg.ReconnectMax}
	for {
		closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
		blocked := conn.NotifyBlocked(make(chan amqp091.Blocking, 4))
		var reason *amqp091.Error
	watch:
		for {
			select {
			case <-s.closing:
				return
			case b, ok := <-blocked:
				if !ok {
					blocked = nil
					continue
				}
				s.setBlocked(b.Active, b.Reason)
				if b.Active {
					s.log.Warn("relay: broker blocked the connection (resource alarm); publishing waits", "reason", b.Reason)
				} else {
					s.log.Info("relay: broker unblocked the connection")
				}
			case reason = <-closed:
				break watch
			}
		}
		s.mu.Lock()
		s.conn = nil
		s.ready = make(chan struct{})
		s.mu.Unlock()
		s.setBlocked(false, "") // a new connection starts unblocked
		s.setState(StateReconnecting)
		s.log.Warn("relay: connection lost; reconnecting", "err", reason)
		if !bo.Sleep(s.ctx) {
			return
		}
		err := bo.Retry(s.ctx, func() error {
			c, err := s.dial(s.ctx)
			if err != nil {
				s.log.Warn("relay: reconnect failed", "err", err, "attempt", bo.Attempts())
				return err
			}
			conn = c
			return nil
		}, nil)
		if err != nil {
			return // closing
		}
		s.install(conn)
		s.log.Info("relay: reconnected")
	}
}

// get returns the current connection and its generation, waiting for a
// reconnect within ctx.
func (s *supervisor) get(ctx context.Context) (*amqp091.Connection, uint64, error) {
	for {
		s.mu.Lock()
		conn, gen, ready := s.conn, s.gen, s.ready
		s.mu.Unlock()
		select {
		case <-s.closing:
			return nil, 0, errConnClosed
		default:
		}
		if conn != nil {
			return conn, gen, nil
		}
		select {
		case <-ready:
		case <-s.closing:
			return nil, 0, errConnClosed
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("relay/amqp: waiting for the connection: %w", ctx.Err())
		}
	}
}

// current returns the generation of the connection now in use (0 while
// reconnecting).
func (s *supervisor) current() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return 0
	}
	return s.gen
}

// openChannel opens a channel on the current connection, waiting for the
// connection and the broker's answer within ctx (see bounded).
func (s *supervisor) openChannel(ctx context.Context) (*amqp091.Channel, *amqp091.Connection, uint64, error) {
	conn, gen, err := s.get(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	ch, err := s.channelOn(ctx, conn)
	if err != nil {
		return nil, nil, 0, err
	}
	return ch, conn, gen, nil
}

// channelOn opens a channel on conn within ctx (see bounded); a channel
// that opens after ctx ended is closed.
func (s *supervisor) channelOn(ctx context.Context, conn *amqp091.Connection) (*amqp091.Channel, error) {
	ch, err := bounded(ctx, s, conn, conn.Channel, func(ch *amqp091.Channel) { _ = ch.Close() })
	if err != nil {
		return nil, fmt.Errorf("relay/amqp: opening a channel: %w", err)
	}
	return ch, nil
}

// rpc runs fn, broker round trips on conn, within ctx (see bounded).
func (s *supervisor) rpc(ctx context.Context, conn *amqp091.Connection, fn func() error) error {
	_, err := bounded(ctx, s, conn, func() (struct{}, error) { return struct{}{}, fn() }, nil)
	return err
}

type callResult[T any] struct {
	v   T
	err error
}

// bounded runs fn, a broker round trip on conn that amqp091 cannot
// interrupt (channel open, declares, qos, consume, confirm.select), until it
// returns, ctx ends or the supervisor closes. In the two latter cases the
// broker is taken as not answering: conn is closed at once, which makes
// fn return and the supervisor redial (a connection with a call nobody
// waits for is out of step with the broker anyway), and bounded returns
// an error wrapping ctx's error (errConnClosed on close). If fn succeeds
// after all, cleanup (when not nil) gets its result, so that a channel
// opened too late is closed.
func bounded[T any](ctx context.Context, s *supervisor, conn *amqp091.Connection, fn func() (T, error), cleanup func(T)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	s.mu.Lock()
	select {
	case <-s.closing:
		s.mu.Unlock()
		return zero, errConnClosed
	default:
	}
	s.calls.Add(2) // fn, and the cleanup of its result if it comes late
	s.mu.Unlock()
	done := make(chan callResult[T], 1)
	go func() {
		defer s.calls.Done()
		v, err := fn()
		done <- callResult[T]{v, err}
	}()
	var err error
	select {
	case r := <-done:
		s.calls.Done() // no cleanup
		return r.v, r.err
	case <-ctx.Done():
		err = fmt.Errorf("the broker did not answer in time: %w", ctx.Err())
	case <-s.closing:
		err = errConnClosed
	}
	select {
	case r := <-done: // answered after all: the connection is fine
		s.calls.Done()
		return r.v, r.err
	default:
	}
	s.abandon(conn, err)
	go func() {
		defer s.calls.Done()
		if r := <-done; r.err == nil && cleanup != nil {
			cleanup(r.v)
		}
	}()
	return zero, err
}

// abandon closes conn at once, without waiting for the broker: a call on
// it was given up. The supervisor sees it close and redials.
func (s *supervisor) abandon(conn *amqp091.Connection, why error) {
	if conn.IsClosed() {
		return
	}
	select {
	case <-s.closing:
	default:
		s.log.Warn("relay: a broker call was given up before the broker answered; closing the connection to reconnect", "err", why)
	}
	// A deadline in the past fails the close handshake's write at once, and
	// every read and write blocked on the socket with it.
	_ = conn.CloseDeadline(time.Now())
}

// close stops supervising and closes the connection within timeout.
// Idempotent.
func (s *supervisor) close(timeout time.Duration) error {
	s.cancel()
	<-s.done
	s.mu.Lock()
	conn := s.conn
	s.conn = nil
	s.mu.Unlock()
	var err error
	if conn != nil {
		err = conn.CloseDeadline(time.Now().Add(timeout))
		if errors.Is(err, amqp091.ErrClosed) {
			err = nil
		}
	}
	// Bounded calls still running see closing and close their connection;
	// none can start after the critical section above (they check closing
	// under mu).
	s.calls.Wait()
	s.setState(StateClosed)
	return err
}

// Error classification.

// isPermanent reports whether err is a broker refusal that a retry on a new
// channel would meet again: access refused, not found (after a redeclare),
// precondition failed, not allowed.
func isPermanent(err error) bool {
	var ae *amqp091.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case amqp091.AccessRefused, amqp091.PreconditionFailed, amqp091.NotAllowed, amqp091.NotImplemented,
		amqp091.ResourceLocked, amqp091.SyntaxError, amqp091.CommandInvalid:
		return true
	}
	return false
}

func isNotFound(err error) bool {
	var ae *amqp091.Error
	return errors.As(err, &ae) && ae.Code == amqp091.NotFound
}

// health is the relay.HealthChecker answer for a supervised connection.
func (s *supervisor) health() error {
	switch st := s.State(); st {
	case StateConnected:
		s.blockMu.Lock()
		reason := s.blockReason
		s.blockMu.Unlock()
		if reason != "" {
			return fmt.Errorf("relay/amqp: the broker at %s blocked publishing on the connection (resource alarm: %s)", relay.Redact(s.cfg.URL), reason)
		}
		return nil
	case StateClosed:
		return relay.ErrClosed
	default:
		return fmt.Errorf("relay/amqp: connection to %s is %s", relay.Redact(s.cfg.URL), st)
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (s *supervisor) setBlocked(blocked bool, reason string) {
	s.blockMu.Lock()
	defer s.blockMu.Unlock()
	s.blockReason = reason
	if blocked && reason == "" {
		s.blockReason = "no reason given"
	}
	select {
	case <-s.unblocked:
		if blocked {
			s.unblocked = make(chan struct{})
		}
	default:
		if !blocked {
			close(s.unblocked)
		}
	}
}

// waitUnblocked returns at once unless the broker blocked the connection
// (a memory or disk alarm), in which case it waits for the unblock within
// ctx: writing to a blocked connection would hang beyond any ctx.
func (s *supervisor) waitUnblocked(ctx context.Context) error {
	s.blockMu.Lock()
	c := s.unblocked
	s.blockMu.Unlock()
	select {
	case <-c:
		return nil
	default:
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("relay/amqp: the broker blocked publishing (resource alarm): %w", ctx.Err())
	case <-s.closing:
		return errConnClosed
	}
}
