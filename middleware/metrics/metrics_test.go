package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/middleware/metrics"
	"github.com/go-relay/relay/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type nopPub struct{}

func (nopPub) Publish(context.Context, string, ...*relay.Message) error { return nil }
func (nopPub) Close() error                                             { return nil }

func TestMetricsCountOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	noWait := func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}
	retry, _ := middleware.Retry(middleware.RetryConfig{MaxAttempts: 3, After: noWait})
	poison, _ := middleware.PoisonQueue(middleware.PoisonConfig{Publisher: nopPub{}, Topic: "p"})
	dedup, _ := middleware.Dedup(middleware.DedupConfig{Store: middleware.NewMemoryStore(middleware.MemoryStoreConfig{})})

	var inFlightSeen float64
	calls := map[string]int{}
	h := router.Chain(m.Middleware, poison, retry, dedup)(func(_ context.Context, msg *relay.Message) ([]*relay.Message, error) {
		inFlightSeen = value(t, reg, "relay_handler_in_flight")
		calls[msg.ID]++
		switch string(msg.Payload) {
		case "flaky":
			if calls[msg.ID] == 1 {
				return nil, errors.New("once")
			}
		case "poison":
			return nil, errors.New("always")
		}
		return nil, nil
	})
	ctx := router.WithHandlerInfo(context.Background(), "billing", "orders")
	ok := relay.NewMessage([]byte("ok"))
	for _, msg := range []*relay.Message{ok, ok.Copy(), relay.NewMessage([]byte("flaky")), relay.NewMessage([]byte("poison"))} {
		if _, err := h(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	// One failure that reaches the router: the poison publisher fails.
	poisonFail, _ := middleware.PoisonQueue(middleware.PoisonConfig{Publisher: failPub{}, Topic: "p"})
	hf := router.Chain(m.Middleware, poisonFail)(func(context.Context, *relay.Message) ([]*relay.Message, error) {
		return nil, errors.New("x")
	})
	if _, err := hf(ctx, relay.NewMessage(nil)); err == nil {
		t.Fatal("no error")
	}

	for name, want := range map[string]float64{
		"relay_handler_handled_total":      4, // ok, its duplicate, flaky (after a retry), poisoned
		"relay_handler_failed_total":       1,
		"relay_handler_retried_total":      3, // flaky once, poison twice
		"relay_handler_poisoned_total":     1,
		"relay_handler_deduplicated_total": 1,
		"relay_handler_in_flight":          0,
		"relay_handler_duration_seconds":   5, // observations
	} {
		if got := value(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if inFlightSeen != 1 {
		t.Fatalf("in-flight during handling %v", inFlightSeen)
	}
	if n := series(t, reg, "relay_handler_duration_seconds"); n != 2 {
		t.Fatalf("%d latency series, want ok and error", n)
	}
	// Registering twice in one registry is an error, not a panic.
	if _, err := metrics.New(metrics.Config{Registerer: reg}); err == nil {
		t.Fatal("duplicate registration accepted")
	}
}

type failPub struct{}

func (failPub) Publish(context.Context, string, ...*relay.Message) error { return errors.New("down") }
func (failPub) Close() error                                             { return nil }

// value sums a metric's series in reg: counter and gauge values,
// histogram sample counts. It checks that every series is labelled with
// handler "billing" and topic "orders".
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	var sum float64
	for _, m := range family(t, reg, name) {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["handler"] != "billing" || labels["topic"] != "orders" {
			t.Fatalf("%s labels %v", name, labels)
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func series(t *testing.T, reg *prometheus.Registry, name string) int {
	return len(family(t, reg, name))
}

func family(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}
