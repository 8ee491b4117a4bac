package bridge

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the bridge's Prometheus series, labelled by route.
type metrics struct {
	forwarded  *prometheus.CounterVec
	failed     *prometheus.CounterVec
	retries    *prometheus.CounterVec
	poisoned   *prometheus.CounterVec
	looped     *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	inFlight   *prometheus.GaugeVec
	inFlightB  *prometheus.GaugeVec
	latency    *prometheus.HistogramVec
	age        *prometheus.GaugeVec
	lag        *prometheus.GaugeVec
	caughtUp   *prometheus.GaugeVec
}

// routeLabel is the one label every bridge series carries: the route's name.
var routeLabel = []string{"route"}

// counterVec is a counter per route.
func counterVec(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, routeLabel)
}

// gaugeVec is a gauge per route.
func gaugeVec(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, routeLabel)
}

// histogramVec is a histogram per route with the given bucket bounds.
func histogramVec(name, help string, buckets []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, routeLabel)
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		forwarded: counterVec("relay_bridge_forwarded_total",
			"Messages published to the destination and acked at the source."),
		failed: counterVec("relay_bridge_failed_total",
			"Deliveries whose publish failed after in-process retries (the message was nacked for redelivery or poisoned; on an at-most-once route: tried once and lost)."),
		retries: counterVec("relay_bridge_retries_total",
			"Publishes retried in process after a failure."),
		poisoned: counterVec("relay_bridge_poisoned_total",
			"Messages moved to the route's poison topic."),
		looped: counterVec("relay_bridge_looped_total",
			"Messages acked without forwarding because their hop marker showed a loop."),
		duplicates: counterVec("relay_bridge_duplicates_total",
			"Messages acked without forwarding because dedup had seen their ID."),
		inFlight: gaugeVec("relay_bridge_in_flight",
			"Messages received from the source and not yet settled."),
		inFlightB: gaugeVec("relay_bridge_in_flight_bytes",
			"Payload bytes of the messages received from the source and not yet settled."),
		latency: histogramVec("relay_bridge_forward_seconds",
			"Time from receiving a message to the destination confirming it.",
			prometheus.ExponentialBuckets(0.0005, 2, 16)), // 0.5ms .. 16s
		age: gaugeVec("relay_bridge_message_age_seconds",
			"Age of the latest forwarded message, from the time in its UUIDv7 ID (end-to-end lag; 0 for IDs without a time)."),
		lag: gaugeVec("relay_bridge_source_lag_messages",
			"Messages waiting at the source for the route's group, where the source adapter reports it (relay.LagReporter)."),
		caughtUp: gaugeVec("relay_bridge_caught_up",
			"1 while the route is caught up (the cutover signal: source lag 0 and nothing in flight at every check for caught_up_after), else 0."),
	}
	reg.MustRegister(m.forwarded, m.failed, m.retries, m.poisoned, m.looped, m.duplicates, m.inFlight, m.inFlightB, m.latency, m.age, m.lag, m.caughtUp)
	return m
}

// routeMetrics are the series of one route.
type routeMetrics struct {
	forwarded, failed, retries, poisoned, looped, duplicates prometheus.Counter
	inFlight, inFlightBytes, age, lag, caughtUp              prometheus.Gauge
	latency                                                  prometheus.Observer
}

func (m *metrics) route(name string) routeMetrics {
	return routeMetrics{
		forwarded:     m.forwarded.WithLabelValues(name),
		failed:        m.failed.WithLabelValues(name),
		retries:       m.retries.WithLabelValues(name),
		poisoned:      m.poisoned.WithLabelValues(name),
		looped:        m.looped.WithLabelValues(name),
		duplicates:    m.duplicates.WithLabelValues(name),
		inFlight:      m.inFlight.WithLabelValues(name),
		inFlightBytes: m.inFlightB.WithLabelValues(name),
		age:           m.age.WithLabelValues(name),
		lag:           m.lag.WithLabelValues(name),
		caughtUp:      m.caughtUp.WithLabelValues(name),
		latency:       m.latency.WithLabelValues(name),
	}
}

// upCollector reports relay_bridge_endpoint_up at scrape time, from the
// same checks as /readyz.
type upCollector struct {
	desc   *prometheus.Desc
	routes []*route
}

func newUpCollector(routes []*route) *upCollector {
	return &upCollector{
		desc: prometheus.NewDesc("relay_bridge_endpoint_up",
			"1 when the route's endpoint is connected (for the source: and subscribed), else 0.",
			[]string{"route", "end"}, nil),
		routes: routes,
	}
}

func (c *upCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *upCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.routes {
		src, dst := r.endpointErrs()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, b2f(src == nil), r.cfg.Name, "source")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, b2f(dst == nil), r.cfg.Name, "destination")
	}
}
