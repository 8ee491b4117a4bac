// Package tracing is OpenTelemetry tracing for relay: router middleware
// that continues a trace from a message's metadata, and a Publisher
// wrapper that starts one. The W3C trace context (traceparent, tracestate)
// travels in Message.Metadata, which every backend carries exactly, so a
// trace continues across brokers and bridges.
//
//	tp := sdktrace.NewTracerProvider(...)
//	cfg := tracing.Config{TracerProvider: tp}
//	pub = tracing.Publisher(pub, cfg)           // "send orders" spans, context injected
//	r.Use(tracing.Middleware(cfg), ...)         // "process orders" spans, outputs injected
//
// The middleware extracts the context from the received message and starts
// a consumer span as its child (a new root when the message carries none),
// records the handler's error, adds events for retries, poisoning and
// duplicates (through middleware.Observer; place it outside those), and
// injects the span's context into every message the handler returns, so
// the next hop continues the same trace.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
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
}

func (c *Config) setDefaults() {
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
}

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

// Middleware starts a consumer span per handling; see the package doc.
func Middleware(cfg Config) router.Middleware {
	cfg.setDefaults()
	tracer := cfg.TracerProvider.Tracer(ScopeName)
	return func(next router.Handler) router.Handler {
		return func(ctx context.Context, msg *relay.Message) ([]*relay.Message, error) {
			topic := msg.Topic()
			if topic == "" {
				topic = router.Topic(ctx)
			}
			opts := []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					attribute.String("messaging.operation.type", "process"),
					attribute.String("messaging.destination.name", topic),
					attribute.String("messaging.message.id", msg.ID),
					attribute.Int("relay.delivery.attempt", msg.Attempt()),
					attribute.String("relay.handler", router.HandlerName(ctx)),
				),
			}
			parent := cfg.Propagator.Extract(ctx, Carrier(msg))
			if sc := trace.SpanContextFromContext(parent); !sc.IsValid() || !sc.IsRemote() {
				// The message carries no context: a new trace, not a child
				// of whatever span the router's context holds.
				opts = append(opts, trace.WithNewRoot())
			}
			ctx, span := tracer.Start(parent, "process "+topic, opts...)
			defer span.End()
			outs, err := next(middleware.WithObserver(ctx, spanObserver{span}), msg)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			for _, o := range outs {
				cfg.Propagator.Inject(ctx, Carrier(o))
			}
			return outs, err
		}
	}
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

// Publisher wraps pub: every Publish runs in a producer span ("send
// TOPIC", a child of the span in ctx) whose context is injected into the
// published messages. The caller's messages are not modified (copies with
// their own metadata are published). Close closes pub.
func Publisher(pub relay.Publisher, cfg Config) relay.Publisher {
	cfg.setDefaults()
	return &publisher{pub: pub, tracer: cfg.TracerProvider.Tracer(ScopeName), prop: cfg.Propagator}
}

type publisher struct {
	pub    relay.Publisher
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// Unwrap returns the wrapped publisher.
func (p *publisher) Unwrap() relay.Publisher { return p.pub }

func (p *publisher) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", topic),
		attribute.Int("messaging.batch.message_count", len(msgs)),
	}
	if len(msgs) == 1 {
		attrs = append(attrs, attribute.String("messaging.message.id", msgs[0].ID))
	}
	ctx, span := p.tracer.Start(ctx, "send "+topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer span.End()
	cps := make([]*relay.Message, len(msgs))
	for i, m := range msgs {
		cp := &relay.Message{ID: m.ID, Key: m.Key, Metadata: m.Metadata.Clone(), Payload: m.Payload}
		p.prop.Inject(ctx, Carrier(cp))
		cps[i] = cp
	}
	err := p.pub.Publish(ctx, topic, cps...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

func (p *publisher) Close() error { return p.pub.Close() }
