// Package tracing is OpenTelemetry tracing for relay by the messaging
// semantic conventions: router middleware (per message and per batch) that
// continues a trace from a message's metadata, and a Publisher wrapper that
// starts one. The W3C trace context (traceparent, tracestate) travels in
// Message.Metadata, which every backend carries exactly, so a trace
// continues across brokers and bridges (bridge.Options.TracerProvider).
//
//	tp := sdktrace.NewTracerProvider(...)
//	t := tracing.New(tracing.Config{TracerProvider: tp, System: "kafka", ConsumerGroup: "billing"})
//	pub = t.Publisher(pub)                  // "send orders" producer spans, context injected
//	r.Use(t.Middleware, ...)                // "process orders" consumer spans, outputs injected
//	r.UseBatch(t.BatchMiddleware)           // one "process orders" span per batch, linked to each message
//
// Span names are "{messaging.operation.name} {messaging.destination.name}";
// attributes are messaging.system, messaging.operation.type and .name,
// messaging.destination.name, messaging.consumer.group.name,
// messaging.message.id, messaging.batch.message_count and error.type (the
// tables are in docs/observability.md). OTEL_SEMCONV_STABILITY_OPT_IN=
// messaging/dup adds the v1.24 attribute names (Config.Stability).
//
// The middleware extracts the context from the received message and starts
// a consumer span as its child and linked to it (a new root when the
// message carries none), records the handler's error, adds events for
// retries, poisoning and duplicates (through middleware.Observer; place it
// outside those), and injects the span's context into every message the
// handler returns, so the next hop continues the same trace.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/msgconv"
	"github.com/go-relay/relay/middleware"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/go-relay/relay/middleware/tracing"

// Config configures tracing. The zero value uses the global tracer provider
// and the W3C trace context.
type Config struct {
	// TracerProvider creates the tracer. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator reads and writes the context in metadata. Default
	// propagation.TraceContext{} (traceparent, tracestate); use a
	// composite to add baggage.
	Propagator propagation.TextMapPropagator
	// System is the messaging.system of the spans: the backend the
	// wrapped publisher or the handler's subscriber talks to. SystemForURL
	// gives it from a relay URL. Default "relay" (unknown backend). A
	// router whose handlers use different backends gives each its own
	// Middleware with router.WithMiddleware.
	System string
	// ConsumerGroup is the messaging.consumer.group.name of process spans
	// (the subscriber's group= parameter); "" omits it.
	ConsumerGroup string
	// ServerAddress and ServerPort are server.address and server.port
	// (the broker's host and port; ServerForURL gives them from a relay
	// URL); unset ones are omitted.
	ServerAddress string
	ServerPort    int
	// Stability chooses the conventions emitted; the zero value
	// (StabilityFromEnv) reads OTEL_SEMCONV_STABILITY_OPT_IN once, when
	// the Tracer is created.
	Stability Stability
}

// Stability chooses which messaging conventions are emitted.
type Stability = msgconv.Stability

const (
	// StabilityFromEnv reads OTEL_SEMCONV_STABILITY_OPT_IN: with
	// "messaging/dup" in the list it is StabilityDup, otherwise
	// StabilityCurrent (see docs/observability.md for why "messaging" and
	// no value mean the same for relay).
	StabilityFromEnv = msgconv.FromEnv
	// StabilityCurrent emits the current messaging conventions.
	StabilityCurrent = msgconv.Current
	// StabilityDup emits the current conventions and, besides them, the
	// v1.24 attribute names (messaging.operation = publish|deliver|create,
	// messaging.kafka.consumer.group). Span names and kinds stay current.
	StabilityDup = msgconv.Dup
)

// SystemForURL returns the messaging.system value of a relay URL:
// kafka, rabbitmq (amqp, amqps), aws_sqs, aws.sns and nats are the
// convention's values; redis, postgresql and relay.memory (mem://) are
// relay's for backends it does not name. An unknown scheme is returned
// as it is.
func SystemForURL(url string) string { return msgconv.SystemForURL(url) }

// ServerForURL returns the broker host and port of a relay URL (port 0
// when it has none; "" for URLs without a host such as sqs:// and mem://).
func ServerForURL(url string) (address string, port int) { return msgconv.ServerForURL(url) }

// ErrorType returns the error.type relay records for err: the name of a
// relay sentinel error (relay.ErrLimit, ...) or context error it wraps,
// else the Go type of the first error in its chain that is not a plain
// wrapper, else "_OTHER"; "" for nil.
func ErrorType(err error) string { return msgconv.ErrorTypeOf(err) }

// Carrier adapts a message's metadata to a propagation.TextMapCarrier.
// Set creates the metadata map when it is nil.
func Carrier(m *relay.Message) propagation.TextMapCarrier { return carrier{m} }

type carrier struct{ m *relay.Message }

func (c carrier) Get(key string) string { return c.m.Metadata.Get(key) }

func (c carrier) Set(key, value string) {
	if c.m.Metadata == nil {
		c.m.Metadata = relay.Metadata{}
	}
	c.m.Metadata[key] = value
}

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c.m.Metadata))
	for k := range c.m.Metadata {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes the span context of ctx into m's metadata with p (nil:
// W3C trace context). For messages published without Publisher.
func Inject(ctx context.Context, m *relay.Message, p propagation.TextMapPropagator) {
	if p == nil {
		p = propagation.TraceContext{}
	}
	p.Inject(ctx, Carrier(m))
}

// Extract returns ctx with the span context carried by m's metadata (nil
// p: W3C trace context).
func Extract(ctx context.Context, m *relay.Message, p propagation.TextMapPropagator) context.Context {
	if p == nil {
		p = propagation.TraceContext{}
	}
	return p.Extract(ctx, Carrier(m))
}

type spanObserver struct{ span trace.Span }

func (o spanObserver) Retried(_ context.Context, _ *relay.Message, ev middleware.RetryEvent) {
	o.span.AddEvent("retry", trace.WithAttributes(
		attribute.Int("relay.retry.attempt", ev.Attempt),
		attribute.String("relay.retry.delay", ev.Delay.String()),
		attribute.String("exception.message", ev.Err.Error()),
	))
}

func (o spanObserver) Poisoned(_ context.Context, _ *relay.Message, err error) {
	o.span.AddEvent("poisoned", trace.WithAttributes(attribute.String("exception.message", err.Error())))
}

func (o spanObserver) Deduplicated(_ context.Context, _ *relay.Message, key string) {
	o.span.AddEvent("deduplicated", trace.WithAttributes(attribute.String("relay.dedup.key", key)))
}
