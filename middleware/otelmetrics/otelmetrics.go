// Package otelmetrics records OpenTelemetry metrics by the messaging
// semantic conventions, beside the Prometheus series of middleware/metrics:
//
//	messaging.client.operation.duration  histogram, s          every Publish (operation send)
//	messaging.client.sent.messages       counter, {message}    messages given to Publish
//	messaging.client.consumed.messages   counter, {message}    messages handed to a handler (per message or batch)
//	messaging.process.duration           histogram, s          one handling: a message or a batch
//
// Attributes: messaging.operation.name, messaging.system,
// messaging.destination.name, messaging.consumer.group.name (consumers,
// when set), server.address and server.port (when set), messaging.operation.type (operation duration) and error.type
// (failures only). With OTEL_SEMCONV_STABILITY_OPT_IN=messaging/dup (or
// Config.Stability) the v1.24 instruments messaging.publish.duration,
// messaging.publish.messages, messaging.deliver.duration and
// messaging.deliver.messages are recorded too, with the v1.24
// messaging.operation attribute. docs/observability.md has the tables.
//
//	m, _ := otelmetrics.New(otelmetrics.Config{MeterProvider: mp, System: "kafka", ConsumerGroup: "billing"})
//	r.Use(m.Middleware)          // per-message handlers
//	r.UseBatch(m.BatchMiddleware) // batch handlers
//	pub = m.Publisher(pub)
package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/msgconv"
	"github.com/go-relay/relay/router"
)

// ScopeName is the instrumentation scope of the instruments.
const ScopeName = "github.com/go-relay/relay/middleware/otelmetrics"

// Metric names of the current conventions.
const (
	OperationDuration = "messaging.client.operation.duration"
	SentMessages      = "messaging.client.sent.messages"
	ConsumedMessages  = "messaging.client.consumed.messages"
	ProcessDuration   = "messaging.process.duration"
)

// Metric names of the v1.24 conventions, recorded besides the current ones
// under messaging/dup.
const (
	OldPublishDuration = "messaging.publish.duration"
	OldPublishMessages = "messaging.publish.messages"
	OldDeliverDuration = "messaging.deliver.duration"
	OldDeliverMessages = "messaging.deliver.messages"
)

// DurationBuckets are the explicit bucket boundaries (seconds) the
// convention advises for the duration histograms.
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// Stability chooses which messaging conventions are recorded; it is the
// same type as tracing.Stability.
type Stability = msgconv.Stability

const (
	// StabilityFromEnv reads OTEL_SEMCONV_STABILITY_OPT_IN:
	// "messaging/dup" in the list gives StabilityDup, anything else
	// StabilityCurrent.
	StabilityFromEnv = msgconv.FromEnv
	// StabilityCurrent records the current instruments only.
	StabilityCurrent = msgconv.Current
	// StabilityDup records the v1.24 instruments besides the current ones.
	StabilityDup = msgconv.Dup
)

// Config configures Metrics.
type Config struct {
	// MeterProvider creates the meter. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// System is messaging.system (tracing.SystemForURL gives it from a
	// relay URL). Default "relay".
	System string
	// ConsumerGroup is messaging.consumer.group.name of the consumer
	// metrics; "" omits it.
	ConsumerGroup string
	// ServerAddress and ServerPort are server.address and server.port
	// (tracing.ServerForURL gives them from a relay URL); unset ones are
	// omitted.
	ServerAddress string
	ServerPort    int
	// Stability: the zero value reads OTEL_SEMCONV_STABILITY_OPT_IN in New.
	Stability Stability
}

// Metrics holds the instruments. Safe for concurrent use; one Metrics may
// serve many handlers, routers and publishers of one System.
type Metrics struct {
	system, group string
	server        []attribute.KeyValue
	dup           bool

	opDuration, processDuration metric.Float64Histogram
	sent, consumed              metric.Int64Counter

	oldPublishDuration, oldDeliverDuration metric.Float64Histogram
	oldPublished, oldDelivered             metric.Int64Counter
}

// New creates the instruments. It fails only when the meter provider
// refuses one.
func New(cfg Config) (*Metrics, error) {
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.System == "" {
		cfg.System = "relay"
	}
	m := &Metrics{
		system: cfg.System,
		group:  cfg.ConsumerGroup,
		server: msgconv.Server(cfg.ServerAddress, cfg.ServerPort),
		dup:    msgconv.Resolve(cfg.Stability) == msgconv.Dup,
	}
	meter := cfg.MeterProvider.Meter(ScopeName)
	var errs []error
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(DurationBuckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit("{message}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.opDuration = hist(OperationDuration, "Duration of a messaging operation initiated by a producer or consumer client.")
	m.processDuration = hist(ProcessDuration, "Duration of processing a message or a batch by a handler.")
	m.sent = counter(SentMessages, "Messages the producer attempted to send to the broker.")
	m.consumed = counter(ConsumedMessages, "Messages delivered to a handler.")
	if m.dup {
		m.oldPublishDuration = hist(OldPublishDuration, "Duration of a publish operation (v1.24 conventions).")
		m.oldDeliverDuration = hist(OldDeliverDuration, "Duration of a deliver operation (v1.24 conventions).")
		m.oldPublished = counter(OldPublishMessages, "Published messages (v1.24 conventions).")
		m.oldDelivered = counter(OldDeliverMessages, "Delivered messages (v1.24 conventions).")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelmetrics: creating instruments: %w", err)
	}
	return m, nil
}

func (m *Metrics) attrs(opType, dest string, consumer bool, err error) (current, old metric.MeasurementOption) {
	a := make([]attribute.KeyValue, 0, 8)
	a = append(a,
		msgconv.OperationName.String(opType),
		msgconv.System.String(m.system),
		msgconv.DestinationName.String(dest),
	)
	a = append(a, m.server...)
	if consumer && m.group != "" {
		a = append(a, msgconv.ConsumerGroup.String(m.group))
	}
	if err != nil {
		a = append(a, msgconv.ErrorType.String(msgconv.ErrorTypeOf(err)))
	}
	current = metric.WithAttributes(a...)
	if m.dup {
		o := []attribute.KeyValue{
			msgconv.OldOperation.String(msgconv.OldOperationValue(opType)),
			msgconv.System.String(m.system),
			msgconv.DestinationName.String(dest),
		}
		if err != nil {
			o = append(o, msgconv.ErrorType.String(msgconv.ErrorTypeOf(err)))
		}
		old = metric.WithAttributes(o...)
	}
	return current, old
}

// process records one handling of n messages that took d and ended with
// err.
func (m *Metrics) process(ctx context.Context, dest string, n int, d time.Duration, err error) {
	cur, old := m.attrs("process", dest, true, err)
	m.processDuration.Record(ctx, d.Seconds(), cur)
	m.consumed.Add(ctx, int64(n), cur)
	if m.dup {
		m.oldDeliverDuration.Record(ctx, d.Seconds(), old)
		m.oldDelivered.Add(ctx, int64(n), old)
	}
}

// Middleware records messaging.process.duration and
// messaging.client.consumed.messages for every handling (a panic passes
// through and counts as a failure with error.type
// "*github.com/go-relay/relay/router.PanicError"). Its signature is
// a router.Middleware: r.Use(m.Middleware).
func (m *Metrics) Middleware(next router.Handler) router.Handler {
	return func(ctx context.Context, msg *relay.Message) (outs []*relay.Message, err error) {
		topic := msg.Topic()
		if topic == "" {
			topic = router.Topic(ctx)
		}
		start := time.Now()
		finished := false
		defer func() {
			if !finished {
				m.process(ctx, topic, 1, time.Since(start), errPanic)
			}
		}()
		outs, err = next(ctx, msg)
		finished = true
		m.process(ctx, topic, 1, time.Since(start), err)
		return outs, err
	}
}

// StartProcess starts timing the handling of msg as Middleware does, for
// code that handles several messages in one call but records each on its
// own (the bridge's batches); end records it with the handling's error.
// Call end exactly once.
func (m *Metrics) StartProcess(ctx context.Context, msg *relay.Message) (end func(error)) {
	topic := msg.Topic()
	if topic == "" {
		topic = router.Topic(ctx)
	}
	start := time.Now()
	return func(err error) { m.process(ctx, topic, 1, time.Since(start), err) }
}

// errPanic stands for a handler that panicked through the middleware.
var errPanic = &router.PanicError{Value: "panic"}

// BatchMiddleware records one messaging.process.duration per batch and
// counts its messages in messaging.client.consumed.messages. A batch that
// failed in part (*router.BatchError) is recorded once with error.type
// "*github.com/go-relay/relay/router.BatchError" for the whole batch, and
// its acked messages are not told apart. Its signature is a
// router.BatchMiddleware: r.UseBatch(m.BatchMiddleware).
func (m *Metrics) BatchMiddleware(next router.BatchHandler) router.BatchHandler {
	return func(ctx context.Context, msgs []*relay.Message) error {
		topic := router.Topic(ctx)
		if topic == "" && len(msgs) > 0 {
			topic = msgs[0].Topic()
		}
		start := time.Now()
		finished := false
		defer func() {
			if !finished {
				m.process(ctx, topic, len(msgs), time.Since(start), errPanic)
			}
		}()
		err := next(ctx, msgs)
		finished = true
		m.process(ctx, topic, len(msgs), time.Since(start), err)
		return err
	}
}

// Publisher wraps pub: every Publish records
// messaging.client.operation.duration (operation send) and adds its
// messages to messaging.client.sent.messages, with error.type when it
// failed. Close closes pub.
func (m *Metrics) Publisher(pub relay.Publisher) relay.Publisher {
	return &publisher{pub: pub, m: m}
}

type publisher struct {
	pub relay.Publisher
	m   *Metrics
}

// Unwrap returns the wrapped publisher.
func (p *publisher) Unwrap() relay.Publisher { return p.pub }

func (p *publisher) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	start := time.Now()
	err := p.pub.Publish(ctx, topic, msgs...)
	d := time.Since(start).Seconds()
	m := p.m
	cur, old := m.attrs("send", topic, false, err)
	m.opDuration.Record(ctx, d, cur, metric.WithAttributes(msgconv.OperationType.String("send")))
	m.sent.Add(ctx, int64(len(msgs)), cur)
	if m.dup {
		m.oldPublishDuration.Record(ctx, d, old)
		m.oldPublished.Add(ctx, int64(len(msgs)), old)
	}
	return err
}

func (p *publisher) Close() error { return p.pub.Close() }
