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
	latency    *prometheus.HistogramVec
	age        *prometheus.GaugeVec
	lag        *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	route := []string{"route"}
	m := &metrics{
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_bridge_forwarded_total",
			Help: "Messages published to the destination and acked at the source.",
		}, route),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_bridge_failed_total",
			Help: "Deliveries whose publish failed after in-process retries (the message was nacked for redelivery or poisoned).",
		}, route),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_bridge_retries_total",
			Help: "Publishes retried in process after a failure.",
		}, route),
		poisoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_bridge_poisoned_total",
			Help: "Messages moved to the route's poison topic.",
		}, route),
		looped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_bridge_looped_total",
			Help: "Messages acked without forwarding because their hop marker showed a loop.",
		}, route),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_bridge_duplicates_total",
			Help: "Messages acked without forwarding because dedup had seen their ID.",
		}, route),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_bridge_in_flight",
			Help: "Messages received from the source and not yet settled.",
		}, route),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_bridge_forward_seconds",
			Help:    "Time from receiving a message to the destination confirming it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms .. 16s
		}, route),
		age: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_bridge_message_age_seconds",
			Help: "Age of the latest forwarded message, from the time in its UUIDv7 ID (end-to-end lag; 0 for IDs without a time).",
		}, route),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_bridge_source_lag_messages",
			Help: "Messages waiting at the source for the route's group, where the source adapter reports it (relay.LagReporter).",
		}, route),
	}
	reg.MustRegister(m.forwarded, m.failed, m.retries, m.poisoned, m.looped, m.duplicates, m.inFlight, m.latency, m.age, m.lag)
	return m
}

// routeMetrics are the series of one route.
type routeMetrics struct {
	forwarded, failed, retries, poisoned, looped, duplicates prometheus.Counter
	inFlight, age, lag                                       prometheus.Gauge
	latency                                                  prometheus.Observer
}

func (m *metrics) route(name string) routeMetrics {
	return routeMetrics{
		forwarded:  m.forwarded.WithLabelValues(name),
		failed:     m.failed.WithLabelValues(name),
		retries:    m.retries.WithLabelValues(name),
		poisoned:   m.poisoned.WithLabelValues(name),
		looped:     m.looped.WithLabelValues(name),
		duplicates: m.duplicates.WithLabelValues(name),
		inFlight:   m.inFlight.WithLabelValues(name),
		age:        m.age.WithLabelValues(name),
		lag:        m.lag.WithLabelValues(name),
		latency:    m.latency.WithLabelValues(name),
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
