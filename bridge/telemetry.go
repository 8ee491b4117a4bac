package bridge

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware/otelmetrics"
	"github.com/go-relay/relay/middleware/tracing"
	"github.com/go-relay/relay/router"
)

// telemetry is the OpenTelemetry instrumentation of one route; its zero
// value (no tracer or meter provider in Options) records nothing.
type telemetry struct {
	srcTracer, dstTracer   *tracing.Tracer
	srcMetrics, dstMetrics *otelmetrics.Metrics
}

// newTelemetry instruments route rc as Options ask: the source side with
// the source's messaging.system and consumer group, the destination side
// with the destination's.
func newTelemetry(rc Route, opts Options) (telemetry, error) {
	var t telemetry
	srcSys, dstSys := tracing.SystemForURL(rc.From.URL), tracing.SystemForURL(rc.To.URL)
	srcHost, srcPort := tracing.ServerForURL(rc.From.URL)
	dstHost, dstPort := tracing.ServerForURL(rc.To.URL)
	group := sourceGroup(rc.From)
	if opts.TracerProvider != nil {
		t.srcTracer = tracing.New(tracing.Config{TracerProvider: opts.TracerProvider, Propagator: opts.Propagator,
			System: srcSys, ConsumerGroup: group, ServerAddress: srcHost, ServerPort: srcPort})
		t.dstTracer = tracing.New(tracing.Config{TracerProvider: opts.TracerProvider, Propagator: opts.Propagator,
			System: dstSys, ServerAddress: dstHost, ServerPort: dstPort})
	}
	if opts.MeterProvider != nil {
		var err error
		if t.srcMetrics, err = otelmetrics.New(otelmetrics.Config{MeterProvider: opts.MeterProvider,
			System: srcSys, ConsumerGroup: group, ServerAddress: srcHost, ServerPort: srcPort}); err != nil {
			return t, err
		}
		if t.dstMetrics, err = otelmetrics.New(otelmetrics.Config{MeterProvider: opts.MeterProvider,
			System: dstSys, ServerAddress: dstHost, ServerPort: dstPort}); err != nil {
			return t, err
		}
	}
	return t, nil
}

// middleware returns the source-side middleware, outermost first.
func (t telemetry) middleware() []router.Middleware {
	var mws []router.Middleware
	if t.srcTracer != nil {
		mws = append(mws, t.srcTracer.Middleware)
	}
	if t.srcMetrics != nil {
		mws = append(mws, t.srcMetrics.Middleware)
	}
	return mws
}

// publisher wraps the destination publisher with the destination metrics.
func (t telemetry) publisher(pub relay.Publisher) relay.Publisher {
	if t.dstMetrics != nil {
		return t.dstMetrics.Publisher(pub)
	}
	return pub
}

// startForward starts the producer span of forwarding src as out (a
// child of ctx, the process span, and linked to the context src
// carries) and injects its context into out's metadata. Without a tracer
// it does nothing.
func (t telemetry) startForward(ctx context.Context, topic string, src, out *relay.Message) (context.Context, func(error)) {
	if t.dstTracer == nil {
		return ctx, func(error) {}
	}
	var links []trace.Link
	if sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), src, t.dstTracer.Propagator())); sc.IsValid() {
		links = append(links, trace.Link{SpanContext: sc})
	}
	return t.dstTracer.StartSend(ctx, topic, []*relay.Message{out}, links...)
}
