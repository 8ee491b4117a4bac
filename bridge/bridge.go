package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-relay/relay"
)

// Options are the parts of a bridge that are not configuration.
type Options struct {
	// Logger receives the bridge's logs. Default slog.Default().
	Logger *slog.Logger
	// Registry receives the bridge's metrics and is served on /metrics.
	// Default: a new registry that also has the Go and process collectors.
	Registry *prometheus.Registry
	// TracerProvider enables tracing (middleware/tracing): each delivery
	// of a route runs in a consumer span "process FROM_TOPIC", a child of
	// the context the source message carries, and its publish in a
	// producer span "send TO_TOPIC" inside it, linked to the source
	// message's context, whose context the forwarded message carries. So
	// one trace follows a message across the bridge. nil: no spans.
	TracerProvider trace.TracerProvider
	// Propagator reads and writes the trace context in metadata. Default
	// propagation.TraceContext{} (traceparent, tracestate).
	Propagator propagation.TextMapPropagator
	// Instance names this process among the replicas of one bridge config
	// (Status.Instance, the status page). Default HOSTNAME:PID.
	Instance string
	// MeterProvider enables the OpenTelemetry messaging metrics
	// (middleware/otelmetrics) beside the Prometheus ones: process
	// duration and consumed messages per source, operation duration and
	// sent messages per destination. nil: none.
	MeterProvider metric.MeterProvider
}

// ErrRunning is returned by Run when the bridge already runs or ran.
var ErrRunning = errors.New("bridge: already running")

// ErrUnrecoverable is matched by Run's error when a route stopped because
// opening its endpoints again cannot help: its source session was fenced
// by another running instance with the same identity (relay.ErrTakenOver),
// or fenced again and again without forwarding. The other routes drain
// and Run returns, so that `relay bridge` exits non-zero and whatever
// supervises it decides, instead of the process looping.
var ErrUnrecoverable = errors.New("bridge: route cannot recover")

// Bridge runs the routes of a Config.
type Bridge struct {
	cfg      Config
	instance string
	log      *slog.Logger
	reg      *prometheus.Registry
	routes   []*route
	closers  []io.Closer // dedup store clients, closed when Run returns
	started  atomic.Bool

	mu        sync.Mutex      // guards the three below, for Status
	startedAt time.Time       // when Run began
	stoppedAt time.Time       // when Run's routes had all stopped
	runDone   <-chan struct{} // Run's ctx: closed once the bridge is stopping
}

func (b *Bridge) closeStores() {
	for _, c := range b.closers {
		_ = c.Close()
	}
	b.closers = nil
}

// New validates cfg and prepares a bridge; it connects to nothing (Run
// does). The returned error is a *ConfigError when cfg is invalid.
func New(cfg Config, opts Options) (*Bridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("bridge", cfg.Name)
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := newMetrics(reg)
	b := &Bridge{cfg: cfg, log: log, reg: reg, instance: opts.Instance}
	if b.instance == "" {
		host, _ := os.Hostname()
		b.instance = host + ":" + strconv.Itoa(os.Getpid())
	}
	for _, rc := range cfg.Routes {
		tel, err := newTelemetry(rc, opts)
		if err != nil {
			return nil, fmt.Errorf("bridge: route %s: %w", rc.Name, err)
		}
		r := newRoute(rc, cfg.ShutdownTimeout, log, m.route(rc.Name))
		r.tel = tel
		b.routes = append(b.routes, r)
	}
	reg.MustRegister(newUpCollector(b.routes))
	return b, nil
}

// Config returns the configuration the bridge runs, with defaults applied.
func (b *Bridge) Config() Config { return b.cfg }

// Run connects every route and forwards until ctx is done; then it drains:
// no new message is taken, messages in flight are published and acked
// (for up to ShutdownTimeout), messages received but not started are given
// back to their group, and every connection is closed. A route whose broker
// fails reconnects with backoff and is not ready meanwhile; it never stops
// the others.
//
// A route with StopWhen "drained" stops on its own once caught up
// (drains and closes as above); Run returns once every route stopped, so
// a bridge whose routes all have it returns when every source is
// drained, with an *IncompleteError for each route that left messages
// behind.
//
// Run blocks. It returns nil after a clean drain, an error wrapping
// router.ErrCloseTimeout when messages were still in flight at the
// timeout (they are redelivered later, not lost), and ErrRunning when
// called twice. An endpoint whose adapter refuses its URL when opening
// (relay.ErrBadURL, relay.ErrUnknownScheme; Validate reports these
// earlier for adapters implementing relay.URLChecker) is not retried: the
// other routes drain and Run returns a *ConfigError naming the route,
// which also matches those errors.
func (b *Bridge) Run(ctx context.Context) error {
	if !b.started.CompareAndSwap(false, true) {
		return ErrRunning
	}
	for _, r := range b.routes {
		if r.cfg.Dedup == nil {
			continue
		}
		st, closer, err := newDedupStore(r.cfg.Dedup)
		if err != nil {
			b.closeStores()
			return fmt.Errorf("route %s: %w", r.cfg.Name, err)
		}
		r.dedupStore = st
		if closer != nil {
			b.closers = append(b.closers, closer)
		}
	}
	b.log.Info("bridge starting", "routes", len(b.routes), "instance", b.instance)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	b.mu.Lock()
	b.startedAt, b.runDone = time.Now(), ctx.Done()
	b.mu.Unlock()
	// The monitor outlives ctx until every route drained, so that the
	// drain is sampled and summarised too.
	monCtx, stopMonitor := context.WithCancel(context.Background())
	monDone := make(chan struct{})
	go func() {
		defer close(monDone)
		b.monitor(monCtx, b.cfg.Log.SummaryInterval)
	}()
	var wg sync.WaitGroup
	errs := make([]error, len(b.routes))
	for i, r := range b.routes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.run(ctx)
			if r.cut.drained.Load() {
				// Joined, so that a drain that also timed out keeps its
				// counts of what it left behind.
				err = errors.Join(err, r.incomplete())
			}
			var ie *IncompleteError
			switch {
			case errors.As(err, &ie):
				errs[i] = err
			case err == nil:
			case badEndpoint(err) && ctx.Err() == nil:
				// An endpoint the adapter refuses: the bridge does not
				// start; the other routes drain.
				errs[i] = &ConfigError{Problems: []Problem{{Path: "routes[" + strconv.Itoa(i) + "]",
					Msg: fmt.Sprintf("route %q: %v", r.cfg.Name, err), err: err}}}
				stop()
			case errors.Is(err, ErrUnrecoverable):
				errs[i] = fmt.Errorf("route %s: %w", r.cfg.Name, err)
				stop()
			default:
				errs[i] = fmt.Errorf("route %s: %w", r.cfg.Name, err)
			}
		}()
	}
	wg.Wait()
	b.mu.Lock()
	b.stoppedAt = time.Now()
	b.mu.Unlock()
	stopMonitor()
	<-monDone
	b.closeStores()
	err := errors.Join(errs...)
	if err != nil {
		b.log.Warn("bridge stopped with errors", "err", err)
	} else {
		b.log.Info("bridge stopped: drained")
	}
	return err
}

// IncompleteError is returned (joined) by Run for a route that stopped on
// its own (Route.StopWhen) and left messages behind: poisoned, or lost on
// an at-most-once route.
type IncompleteError struct {
	Route            string
	Poisoned, Failed int64
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("route %s drained its source, but not every message reached the destination: %d poisoned, %d failed", e.Route, e.Poisoned, e.Failed)
}

// Ready returns nil when every route is subscribed to its source and both
// of its endpoints report a usable connection; otherwise an error naming
// each route that is not ready and why. Safe for concurrent use.
func (b *Bridge) Ready() error {
	var errs []error
	for _, r := range b.routes {
		if err := r.ready(); err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", r.cfg.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Handler serves the operations endpoints:
//
//	/         the status page (HTML, self-contained; exactly "/", GET only)
//	/healthz  200 "ok" while the process runs (liveness)
//	/readyz   200 "ready" when Ready is nil, else 503 with the reasons
//	/metrics  Prometheus metrics
//	/routes   the Status of every route as JSON (docs/bridge.md)
//	/debug/pprof/  Go's runtime profiles, only with HTTPConfig.Profiling
//
// Reasons and errors never contain passwords.
func (b *Bridge) Handler() http.Handler {
	mux := http.NewServeMux()
	// "/{$}" is "/" alone: every other unknown path stays a 404.
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		statusPage.serve(w, b.Status())
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := b.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready:\n" + redactAll(err.Error()) + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(b.reg, promhttp.HandlerOpts{Registry: b.reg}))
	mux.HandleFunc("/routes", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(b.Status())
	})
	if b.cfg.HTTP.Profiling {
		mux.Handle("GET /debug/pprof/{name...}", profiles{})
	}
	return mux
}

// redactAll redacts every URL-looking word of s (a password or a secret
// query parameter), as a last line of defence: adapters' errors are
// expected to carry redacted URLs already.
func redactAll(s string) string {
	lines := strings.Split(s, "\n")
	for l, line := range lines {
		words := strings.Split(line, " ")
		for i, w := range words {
			if strings.Contains(w, "://") {
				trimmed := strings.Trim(w, `"'(),;`)
				words[i] = strings.Replace(w, trimmed, relay.Redact(trimmed), 1)
			}
		}
		lines[l] = strings.Join(words, " ")
	}
	return strings.Join(lines, "\n")
}
