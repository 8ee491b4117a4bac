package otelmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/middleware/otelmetrics"
	"github.com/go-relay/relay/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newMetrics(t *testing.T, cfg otelmetrics.Config) (*otelmetrics.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cfg.MeterProvider = mp
	m, err := otelmetrics.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

// point is one data point: its attributes as "k=v" sorted and joined by
// ",", and its count (histogram) or value (sum).
type point struct {
	attrs string
	n     int64
}

type collected map[string]struct {
	unit   string
	points []point
	bounds []float64
}

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelmetrics.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			e := out[m.Name]
			e.unit = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					e.points = append(e.points, point{attrString(p.Attributes.ToSlice()), int64(p.Count)})
					e.bounds = p.Bounds
				}
			case metricdata.Sum[int64]:
				if !d.IsMonotonic {
					t.Errorf("%s is not monotonic", m.Name)
				}
				for _, p := range d.DataPoints {
					e.points = append(e.points, point{attrString(p.Attributes.ToSlice()), p.Value})
				}
			default:
				t.Fatalf("%s: data %T", m.Name, m.Data)
			}
			sort.Slice(e.points, func(i, j int) bool { return e.points[i].attrs < e.points[j].attrs })
			out[m.Name] = e
		}
	}
	return out
}

func attrString(kvs []attribute.KeyValue) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = string(kv.Key) + "=" + kv.Value.String()
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// want checks metric name: its unit and exactly the points given.
func (c collected) want(t *testing.T, name, unit string, points ...point) {
	t.Helper()
	e, ok := c[name]
	if !ok {
		t.Errorf("no metric %s", name)
		return
	}
	if e.unit != unit {
		t.Errorf("%s unit %q, want %q", name, e.unit, unit)
	}
	sort.Slice(points, func(i, j int) bool { return points[i].attrs < points[j].attrs })
	if !slices.Equal(e.points, points) {
		t.Errorf("%s points:\n got %v\nwant %v", name, e.points, points)
	}
	if unit == "s" && !slices.Equal(e.bounds, otelmetrics.DurationBuckets) {
		t.Errorf("%s buckets %v, want the convention's %v", name, e.bounds, otelmetrics.DurationBuckets)
	}
}

const (
	procOK   = "messaging.consumer.group.name=billing,messaging.destination.name=orders,messaging.operation.name=process,messaging.system=kafka"
	procFail = "error.type=relay.ErrLimit," + procOK
)

// Per-message handlings: two succeed, one fails with a relay error and one
// panics; each counts one consumed message and one process duration, with
// error.type for the failures.
func TestHandlerMetrics(t *testing.T) {
	m, reader := newMetrics(t, otelmetrics.Config{System: "kafka", ConsumerGroup: "billing", Stability: otelmetrics.StabilityCurrent})
	h := m.Middleware(func(_ context.Context, msg *relay.Message) ([]*relay.Message, error) {
		switch msg.ID {
		case "bad":
			return nil, fmt.Errorf("insert: %w", relay.ErrLimit)
		case "boom":
			panic("boom")
		}
		return nil, nil
	})
	ctx := router.WithHandlerInfo(context.Background(), "h", "orders")
	for _, id := range []string{"a", "bad", "b"} {
		_, _ = h(ctx, &relay.Message{ID: id})
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not pass through")
			}
		}()
		_, _ = h(ctx, &relay.Message{ID: "boom"})
	}()
	c := collect(t, reader)
	panicked := "error.type=*github.com/go-relay/relay/router.PanicError," + procOK
	c.want(t, "messaging.process.duration", "s", point{procOK, 2}, point{procFail, 1}, point{panicked, 1})
	c.want(t, "messaging.client.consumed.messages", "{message}", point{procOK, 2}, point{procFail, 1}, point{panicked, 1})
	for _, name := range []string{"messaging.client.operation.duration", "messaging.client.sent.messages", "messaging.deliver.duration"} {
		if _, ok := c[name]; ok {
			t.Errorf("%s recorded by a consumer without dup", name)
		}
	}
}

// A batch handler's batch is one process duration and counts all its
// messages as consumed.
func TestBatchMetrics(t *testing.T) {
	m, reader := newMetrics(t, otelmetrics.Config{System: "relay.memory", ConsumerGroup: "g", Stability: otelmetrics.StabilityCurrent})
	broker := "otelbatch-" + relay.NewID()
	pub := memory.NewPublisher(broker, memory.PublisherConfig{})
	defer pub.Close()
	sub, _ := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "g"})
	if err := sub.(relay.Provisioner).Provision(context.Background(), "rows"); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), "rows", relay.NewMessage(nil), relay.NewMessage(nil), relay.NewMessage(nil)); err != nil {
		t.Fatal(err)
	}
	r, _ := router.New(router.Config{Logger: slog.New(slog.DiscardHandler)})
	r.Own(sub)
	_ = r.UseBatch(m.BatchMiddleware)
	done := make(chan int, 1)
	_ = r.AddBatchHandler("bulk", sub, "rows", func(_ context.Context, msgs []*relay.Message) error {
		done <- len(msgs)
		return nil
	}, router.WithBatchSize(3), router.WithBatchWait(5*time.Second))
	go func() { _ = r.Run(context.Background()) }()
	select {
	case n := <-done:
		if n != 3 {
			t.Fatalf("batch of %d, want 3", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("batch not handled")
	}
	_ = r.Close()
	<-r.Done()
	attrs := "messaging.consumer.group.name=g,messaging.destination.name=rows,messaging.operation.name=process,messaging.system=relay.memory"
	c := collect(t, reader)
	c.want(t, "messaging.process.duration", "s", point{attrs, 1})
	c.want(t, "messaging.client.consumed.messages", "{message}", point{attrs, 3})
}

type failingPub struct{ err error }

func (p failingPub) Publish(context.Context, string, ...*relay.Message) error { return p.err }
func (p failingPub) Close() error                                             { return nil }

// Publishes: one operation duration per call (operation send), sent
// messages per message, error.type on the failed call.
func TestPublisherMetrics(t *testing.T) {
	m, reader := newMetrics(t, otelmetrics.Config{System: "rabbitmq", Stability: otelmetrics.StabilityCurrent})
	ok := m.Publisher(failingPub{})
	bad := m.Publisher(failingPub{errors.Join(errors.New("x"), relay.ErrMessageTooLarge)})
	_ = ok.Publish(context.Background(), "jobs", relay.NewMessage(nil))
	_ = ok.Publish(context.Background(), "jobs", relay.NewMessage(nil), relay.NewMessage(nil), relay.NewMessage(nil))
	if err := bad.Publish(context.Background(), "jobs", relay.NewMessage(nil), relay.NewMessage(nil)); !errors.Is(err, relay.ErrMessageTooLarge) {
		t.Fatalf("error %v not passed through", err)
	}
	base := "messaging.destination.name=jobs,messaging.operation.name=send,messaging.system=rabbitmq"
	failed := "error.type=relay.ErrMessageTooLarge," + base
	c := collect(t, reader)
	withType := func(a string) string {
		return strings.Replace(a, "messaging.operation.name=send,", "messaging.operation.name=send,messaging.operation.type=send,", 1)
	}
	c.want(t, "messaging.client.operation.duration", "s", point{withType(base), 2}, point{withType(failed), 1})
	c.want(t, "messaging.client.sent.messages", "{message}", point{base, 4}, point{failed, 2})
}

// messaging/dup records the v1.24 instruments too, with the v1.24
// messaging.operation, besides the current ones.
func TestDupMetrics(t *testing.T) {
	t.Setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "messaging/dup")
	m, reader := newMetrics(t, otelmetrics.Config{System: "kafka", ConsumerGroup: "billing"})
	_ = m.Publisher(failingPub{}).Publish(context.Background(), "orders", relay.NewMessage(nil), relay.NewMessage(nil))
	_, _ = m.Middleware(func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil })(
		router.WithHandlerInfo(context.Background(), "h", "orders"), relay.NewMessage(nil))
	c := collect(t, reader)
	c.want(t, "messaging.client.sent.messages", "{message}", point{"messaging.destination.name=orders,messaging.operation.name=send,messaging.system=kafka", 2})
	c.want(t, "messaging.process.duration", "s", point{procOK, 1})
	c.want(t, "messaging.publish.duration", "s", point{"messaging.destination.name=orders,messaging.operation=publish,messaging.system=kafka", 1})
	c.want(t, "messaging.publish.messages", "{message}", point{"messaging.destination.name=orders,messaging.operation=publish,messaging.system=kafka", 2})
	c.want(t, "messaging.deliver.duration", "s", point{"messaging.destination.name=orders,messaging.operation=deliver,messaging.system=kafka", 1})
	c.want(t, "messaging.deliver.messages", "{message}", point{"messaging.destination.name=orders,messaging.operation=deliver,messaging.system=kafka", 1})
}
