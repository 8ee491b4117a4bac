package bridge

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/backoff"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// openTimeout bounds connecting to one endpoint.
const openTimeout = 30 * time.Second

// route runs one Route: it opens the endpoints, runs a router whose single
// handler forwards each message, and starts again with backoff when the
// endpoints fail.
type route struct {
	cfg    Route
	srcHop string
	dstHop string
	// hopOnly is the metadata of every copy of a message that has none:
	// the hop marker alone, one map shared by those copies (see copyOf).
	hopOnly      relay.Metadata
	fromURL      string // source URL with group= set
	shutdown     time.Duration
	log          *slog.Logger
	m            routeMetrics
	dedupStore   middleware.Store
	pollInterval time.Duration
	tel          telemetry

	mu      sync.Mutex
	sess    *session
	lastErr error

	// Read by Status; written without a lock the forwarding path takes.
	phase       atomic.Int32 // phaseStopped, phaseStarting, phaseRetrying
	lastFailure atomic.Pointer[failure]
	lag         atomic.Int64 // valid when lagKnown
	lagKnown    atomic.Bool
	rates       rateRing
}

// session is one connected run of a route.
type session struct {
	pubH relay.HealthChecker
	subH relay.HealthChecker
	rt   *router.Router
}

func newRoute(rc Route, shutdown time.Duration, log *slog.Logger, m routeMetrics) *route {
	r := &route{
		cfg:          rc,
		srcHop:       sourceHopID(rc.From),
		dstHop:       destHopID(rc.To),
		hopOnly:      relay.Metadata{HopsKey: sourceHopID(rc.From)},
		fromURL:      sourceURL(rc.From),
		shutdown:     shutdown,
		log:          log.With("route", rc.Name),
		m:            m,
		pollInterval: 5 * time.Second,
	}
	return r
}

// sourceURL is the URL the route subscribes with: the configured one plus
// group=, inflight= and inflight_bytes= unless it has them, and for
// kafka:// share_payloads=true unless it says otherwise (a route only reads
// payloads, so it need not pay a copy per message).
func sourceURL(s Source) string {
	raw := withGroup(s.URL, s.Group)
	share := scheme(raw) == "kafka"
	if s.InFlight <= 0 && s.InFlightBytes <= 0 && !share {
		return raw
	}
	return withQuery(raw, func(q url.Values) {
		if share && !q.Has("share_payloads") {
			q.Set("share_payloads", "true")
		}
		if s.InFlight > 0 && q.Get("inflight") == "" {
			q.Set("inflight", strconv.Itoa(s.InFlight))
		}
		if s.InFlightBytes > 0 && q.Get("inflight_bytes") == "" {
			q.Set("inflight_bytes", strconv.FormatInt(s.InFlightBytes, 10))
		}
	})
}

// withGroup returns raw with group=g in its query, unless g is empty.
func withGroup(raw, g string) string {
	if g == "" {
		return raw
	}
	return withQuery(raw, func(q url.Values) { q.Set("group", g) })
}

// withQuery returns raw with its query changed by edit. A URL without a
// host keeps its "//" (sqs://?region=...).
func withQuery(raw string, edit func(url.Values)) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	edit(q)
	u.RawQuery = q.Encode()
	out := u.String()
	if u.Host == "" && u.Path == "" && u.Opaque == "" && strings.HasPrefix(raw, u.Scheme+"://") {
		out = u.Scheme + "://" + strings.TrimPrefix(out, u.Scheme+":")
	}
	return out
}

// run forwards until ctx is done, then drains. It returns nil after a
// clean drain and router.ErrCloseTimeout (wrapped) when in-flight messages
// outlived the shutdown timeout.
func (r *route) run(ctx context.Context) error {
	defer r.phase.Store(phaseStopped)
	bo := backoff.Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second}
	for {
		r.phase.Store(phaseStarting)
		connected, err := r.session(ctx)
		if ctx.Err() != nil {
			if !connected {
				return nil // stopped while connecting: nothing was in flight
			}
			return err
		}
		r.fail(err)
		if !connected && badEndpoint(err) {
			// Retrying cannot fix a URL the adapter refuses (Validate
			// catches these first for adapters that implement
			// relay.URLChecker).
			r.setErr(err)
			r.log.Error("route cannot start: an endpoint URL is invalid", "err", err)
			return err
		}
		if connected {
			bo.Reset()
		}
		r.setErr(err)
		r.phase.Store(phaseRetrying)
		r.log.Error("route stopped; reconnecting", "err", err, "attempt", bo.Attempts()+1)
		if !bo.Sleep(ctx) {
			return nil
		}
	}
}

// open opens the destination publisher and the source subscriber: for an
// exactly-once route, the two halves of one exactly-once pair.
func (r *route) open(ctx context.Context) (relay.Publisher, relay.Subscriber, error) {
	if r.cfg.Guarantee == relay.ExactlyOnce {
		sub, pub, err := relay.OpenExactlyOnce(ctx, r.fromURL, r.cfg.To.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("open exactly-once pair %s to %s: %w", relay.Redact(r.fromURL), relay.Redact(r.cfg.To.URL), err)
		}
		return pub, sub, nil
	}
	pub, err := relay.OpenPublisher(ctx, r.cfg.To.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("open destination %s: %w", relay.Redact(r.cfg.To.URL), err)
	}
	sub, err := relay.OpenSubscriber(ctx, r.fromURL)
	if err != nil {
		_ = pub.Close()
		return nil, nil, fmt.Errorf("open source %s: %w", relay.Redact(r.fromURL), err)
	}
	return pub, sub, nil
}

// routerGuarantee is the guarantee the route's router handler runs with.
// The forwarder publishes itself (not through router outputs), so an
// exactly-once route's handler runs as at-least-once (ack after the
// publish, nack on failure) on the exactly-once pair, whose transactions
// turn that into exactly-once.
func (r *route) routerGuarantee() relay.Guarantee {
	if r.cfg.Guarantee == relay.ExactlyOnce {
		return relay.AtLeastOnce
	}
	return r.cfg.Guarantee
}

// badEndpoint reports whether err, from opening an endpoint, says the URL
// or its options are invalid (rather than the broker unreachable).
func badEndpoint(err error) bool {
	return errors.Is(err, relay.ErrBadURL) || errors.Is(err, relay.ErrUnknownScheme)
}

func (r *route) setErr(err error) {
	r.mu.Lock()
	r.sess, r.lastErr = nil, err
	r.mu.Unlock()
}

// session connects, runs a router until ctx is done or the subscription
// fails, and closes everything it opened. connected reports whether it got
// as far as subscribing.
func (r *route) session(ctx context.Context) (connected bool, err error) {
	var closers []io.Closer
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i].Close()
		}
	}
	openCtx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	pub, sub, err := r.open(openCtx)
	if err != nil {
		return false, err
	}
	closers = append(closers, pub, sub)
	poisonPub := pub
	if p := r.cfg.Poison; p != nil && p.URL != r.cfg.To.URL {
		if poisonPub, err = relay.OpenPublisher(openCtx, p.URL); err != nil {
			closeAll()
			return false, fmt.Errorf("open poison destination %s: %w", relay.Redact(p.URL), err)
		}
		closers = append(closers, poisonPub)
	}
	if pv, ok := sub.(relay.Provisioner); ok {
		if err := pv.Provision(openCtx, r.cfg.From.Topic); err != nil {
			closeAll()
			return false, fmt.Errorf("provision source topic %q: %w", r.cfg.From.Topic, err)
		}
	}
	cancel()

	rt, err := router.New(router.Config{CloseTimeout: r.shutdown, Logger: r.log})
	if err != nil {
		closeAll()
		return false, err
	}
	mws, err := r.chain(poisonPub)
	if err != nil {
		closeAll()
		return false, err
	}
	f := &forwarder{r: r, pub: r.tel.publisher(pub)}
	if r.pipelined() {
		f.send = f.publishOne
		err = r.addPipelined(rt, sub, f, mws)
	} else {
		flushers := 1
		if r.cfg.Batch > 1 {
			flushers = min(4, r.cfg.Concurrency)
		}
		f.batch = newBatcher(f.pub, r.cfg.To.Topic, r.cfg.Batch, flushers, r.cfg.PublishTimeout)
		f.send = f.batch.publish
		err = rt.AddHandler(r.cfg.Name, sub, r.cfg.From.Topic, f.handle,
			router.WithConcurrency(r.cfg.Concurrency),
			router.WithGuarantee(r.routerGuarantee()),
			router.WithMiddleware(mws...))
	}
	if err != nil {
		if f.batch != nil {
			f.batch.close()
		}
		closeAll()
		return false, err
	}
	rt.Own(closers...)
	s := &session{rt: rt}
	s.pubH, _ = pub.(relay.HealthChecker)
	s.subH, _ = sub.(relay.HealthChecker)
	r.mu.Lock()
	r.sess = s
	r.mu.Unlock()

	pollDone := make(chan struct{})
	pollCtx, stopPoll := context.WithCancel(ctx)
	go func() {
		defer close(pollDone)
		r.poll(pollCtx, sub)
	}()
	r.log.Info("route connected", "from", relay.Redact(r.fromURL), "from_topic", r.cfg.From.Topic,
		"to", relay.Redact(r.cfg.To.URL), "to_topic", r.cfg.To.Topic,
		"concurrency", r.cfg.Concurrency, "guarantee", r.cfg.Guarantee.String(), "hop_source", r.srcHop, "hop_destination", r.dstHop)
	err = rt.Run(ctx)
	select {
	case <-rt.Running():
		connected = true
	default: // the subscription failed
	}
	if f.batch != nil {
		f.batch.close()
	}
	stopPoll()
	<-pollDone
	if ctx.Err() != nil {
		r.setErr(errors.New("stopped"))
		if err != nil {
			r.log.Warn("route drained with errors", "err", err)
		} else {
			r.log.Info("route drained")
		}
		return connected, err
	}
	if err == nil {
		err = errors.New("router stopped")
	}
	return connected, err
}

// poll refreshes the lag gauge (and the source lag of Status) until ctx
// is done, when the source reports lag (relay.LagReporter). A source that
// answers ErrNotSupported is not asked again and its lag is unknown; other
// errors leave the last value.
func (r *route) poll(ctx context.Context, sub relay.Subscriber) {
	lr, ok := sub.(relay.LagReporter)
	if !ok {
		return
	}
	t := time.NewTicker(r.pollInterval)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, r.pollInterval)
		n, err := lr.Lag(lctx, r.cfg.From.Topic)
		cancel()
		switch {
		case err == nil:
			r.lag.Store(n)
			r.lagKnown.Store(true)
			r.m.lag.Set(float64(n))
		case errors.Is(err, relay.ErrNotSupported):
			r.lagKnown.Store(false)
			return
		default:
			r.log.Debug("source lag unknown", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// subscribed reports whether the session's router runs: subscribed to
// the source and not stopped.
func (s *session) subscribed() bool {
	select {
	case <-s.rt.Running():
	default:
		return false
	}
	select {
	case <-s.rt.Done():
		return false
	default:
		return true
	}
}

func (s *session) sourceErr() error {
	select {
	case <-s.rt.Running():
	default:
		return errors.New("not subscribed yet")
	}
	select {
	case <-s.rt.Done():
		return errors.New("stopped")
	default:
	}
	if s.subH != nil {
		return s.subH.Health()
	}
	return nil
}

func (s *session) destErr() error {
	if s.pubH != nil {
		return s.pubH.Health()
	}
	return nil
}

// ready returns nil when the route's source is subscribed and both ends
// report a usable connection, or why not.
func (r *route) ready() error {
	src, dst := r.endpointErrs()
	if src != nil && src == dst {
		return src
	}
	if src != nil {
		return fmt.Errorf("source: %w", src)
	}
	if dst != nil {
		return fmt.Errorf("destination: %w", dst)
	}
	return nil
}

// endpointErrs returns why the source and the destination are not usable
// (nil when they are). Without a session both are the same error.
func (r *route) endpointErrs() (src, dst error) {
	r.mu.Lock()
	s, last := r.sess, r.lastErr
	r.mu.Unlock()
	if s == nil {
		err := errors.New("connecting")
		if last != nil {
			err = fmt.Errorf("not connected: %w", last)
		}
		return err, err
	}
	return s.sourceErr(), s.destErr()
}

// forwarder is the route's router handler. It publishes the copy itself
// (and returns no outputs), so that the retry, poison and dedup middleware
// around it see the destination's answer: the router acks the source only
// when the handler returned nil, which is after the destination confirmed.
// On a pipelined route (see pipeline.go) the router calls handleBatch, and
// handle only forwards what failed in a batch, one message at a time.
type forwarder struct {
	r     *route
	pub   relay.Publisher
	batch *batcher // without pipelining: joins concurrent copies into calls
	// send publishes one copy: through batch, or alone on a pipelined route.
	send func(ctx context.Context, c *relay.Message) error
	// single is the per-message chain around handle (pipelined routes).
	single router.Handler
}

// publishOne publishes c alone, bounded by the route's publish timeout.
func (f *forwarder) publishOne(ctx context.Context, c *relay.Message) error {
	return f.publishAll(ctx, []*relay.Message{c})
}

func (f *forwarder) handle(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
	r := f.r
	if looped(m.Metadata, r.srcHop, r.dstHop) {
		r.m.looped.Inc()
		r.log.Debug("not forwarding a message that would loop", "id", m.ID, "hops", m.Metadata[HopsKey])
		return nil, nil
	}
	c := r.copyOf(m)
	start := time.Now()
	ctx, end := r.tel.startForward(ctx, r.cfg.To.Topic, m, c)
	err := f.send(ctx, c)
	end(err)
	if err != nil {
		err = fmt.Errorf("publish to %q: %w", r.cfg.To.Topic, err)
		if rejected(err) {
			err = relay.Permanent(err)
		}
		return nil, err
	}
	r.m.forwarded.Inc()
	r.m.latency.Observe(time.Since(start).Seconds())
	if t, ok := idTime(m.ID); ok {
		r.m.age.Set(max(0, time.Since(t).Seconds()))
	}
	return nil, nil
}

// idTime returns the time in a UUIDv7 ID.
func idTime(id string) (time.Time, bool) {
	if len(id) != 36 || id[14] != '7' {
		return time.Time{}, false
	}
	var b [6]byte
	if _, err := hex.Decode(b[:4], []byte(id[0:8])); err != nil {
		return time.Time{}, false
	}
	if _, err := hex.Decode(b[4:], []byte(id[9:13])); err != nil {
		return time.Time{}, false
	}
	ms := int64(b[0])<<40 | int64(b[1])<<32 | int64(b[2])<<24 | int64(b[3])<<16 | int64(b[4])<<8 | int64(b[5])
	return time.UnixMilli(ms), true
}
