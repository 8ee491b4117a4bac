// Package metrics is router middleware that exports Prometheus metrics for
// every handler: outcomes, retries, poisoned and deduplicated messages,
// messages in flight and handling latency.
//
// Put it outermost (first in router.Use) so that it sees the final outcome
// and, through middleware.Observer, what Retry, PoisonQueue and Dedup did
// inside.
//
// Series (default namespace "relay"; labels handler and topic):
//
//	relay_handler_handled_total        handlings that succeeded: the message is acked (includes poisoned and deduplicated)
//	relay_handler_failed_total         handlings that returned an error: the message is nacked for redelivery
//	relay_handler_retried_total        in-process retries by middleware.Retry
//	relay_handler_poisoned_total       messages published to a poison topic by middleware.PoisonQueue
//	relay_handler_deduplicated_total   duplicates acked without running by middleware.Dedup
//	relay_handler_in_flight            handlings in progress (gauge)
//	relay_handler_duration_seconds     handling latency (histogram; extra label result="ok"|"error")
package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// Config configures Metrics.
type Config struct {
	// Registerer receives the collectors. Default
	// prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// Namespace prefixes every metric name. Default "relay".
	Namespace string
	// Buckets of the latency histogram, in seconds. Default 0.5ms to 16s,
	// doubling.
	Buckets []float64
	// ConstLabels are added to every series (e.g. service name).
	ConstLabels prometheus.Labels
}

// Metrics holds the collectors. Safe for concurrent use; one Metrics may
// serve many handlers and routers.
type Metrics struct {
	handled, failed, retried, poisoned, deduplicated *prometheus.CounterVec
	inFlight                                         *prometheus.GaugeVec
	duration                                         *prometheus.HistogramVec

	series sync.Map // seriesKey → *series
}

type seriesKey struct{ handler, topic string }

// series are the resolved collectors of one (handler, topic); it is also
// the Observer that the inner middleware report to.
type series struct {
	handled, failed, retried, poisoned, deduplicated prometheus.Counter
	inFlight                                         prometheus.Gauge
	ok, err                                          prometheus.Observer
}

// New creates the collectors and registers them.
func New(cfg Config) (*Metrics, error) {
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.DefaultRegisterer
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "relay"
	}
	if cfg.Buckets == nil {
		cfg.Buckets = prometheus.ExponentialBuckets(0.0005, 2, 16)
	}
	labels := []string{"handler", "topic"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.Namespace, Subsystem: "handler", Name: name, Help: help, ConstLabels: cfg.ConstLabels,
		}, labels)
	}
	m := &Metrics{
		handled:      counter("handled_total", "Handlings that succeeded; the message was acked (includes poisoned and deduplicated messages)."),
		failed:       counter("failed_total", "Handlings that returned an error; the message was nacked for redelivery."),
		retried:      counter("retried_total", "In-process retries by the Retry middleware."),
		poisoned:     counter("poisoned_total", "Messages published to a poison topic by the PoisonQueue middleware."),
		deduplicated: counter("deduplicated_total", "Duplicates acked without running the handler by the Dedup middleware."),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: cfg.Namespace, Subsystem: "handler", Name: "in_flight", Help: "Handlings in progress.", ConstLabels: cfg.ConstLabels,
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: cfg.Namespace, Subsystem: "handler", Name: "duration_seconds", Help: "Time to handle a message, through all middleware inside this one.",
			Buckets: cfg.Buckets, ConstLabels: cfg.ConstLabels,
		}, append(labels, "result")),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.handled, m.failed, m.retried, m.poisoned, m.deduplicated, m.inFlight, m.duration} {
		if err := cfg.Registerer.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("metrics: registering collectors: %w", err)
	}
	return m, nil
}

func (m *Metrics) seriesFor(handler, topic string) *series {
	k := seriesKey{handler, topic}
	if s, ok := m.series.Load(k); ok {
		return s.(*series)
	}
	s := &series{
		handled:      m.handled.WithLabelValues(handler, topic),
		failed:       m.failed.WithLabelValues(handler, topic),
		retried:      m.retried.WithLabelValues(handler, topic),
		poisoned:     m.poisoned.WithLabelValues(handler, topic),
		deduplicated: m.deduplicated.WithLabelValues(handler, topic),
		inFlight:     m.inFlight.WithLabelValues(handler, topic),
		ok:           m.duration.WithLabelValues(handler, topic, "ok"),
		err:          m.duration.WithLabelValues(handler, topic, "error"),
	}
	actual, _ := m.series.LoadOrStore(k, s)
	return actual.(*series)
}

// Middleware records the metrics of every handling. Its signature is a
// router.Middleware: r.Use(m.Middleware, ...).
func (m *Metrics) Middleware(next router.Handler) router.Handler {
	return func(ctx context.Context, msg *relay.Message) ([]*relay.Message, error) {
		topic := msg.Topic()
		if topic == "" {
			topic = router.Topic(ctx)
		}
		s := m.seriesFor(router.HandlerName(ctx), topic)
		s.inFlight.Inc()
		start := time.Now()
		finished := false
		defer func() {
			s.inFlight.Dec()
			if !finished { // a panic passes through: the router nacks
				s.failed.Inc()
				s.err.Observe(time.Since(start).Seconds())
			}
		}()
		outs, err := next(middleware.WithObserver(ctx, s), msg)
		finished = true
		elapsed := time.Since(start).Seconds()
		if err != nil {
			s.failed.Inc()
			s.err.Observe(elapsed)
		} else {
			s.handled.Inc()
			s.ok.Observe(elapsed)
		}
		return outs, err
	}
}

func (s *series) Retried(context.Context, *relay.Message, middleware.RetryEvent) { s.retried.Inc() }
func (s *series) Poisoned(context.Context, *relay.Message, error)                { s.poisoned.Inc() }
func (s *series) Deduplicated(context.Context, *relay.Message, string)           { s.deduplicated.Inc() }
