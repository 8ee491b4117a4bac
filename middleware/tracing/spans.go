package tracing

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/msgconv"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// Tracer creates relay's messaging spans for one Config. Create it once
// (New) and share it: it is safe for concurrent use and holds no per-span
// state.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	system string
	group  string
	server []attribute.KeyValue
	dup    bool
}

// New returns the Tracer of cfg, with its defaults applied. It reads
// OTEL_SEMCONV_STABILITY_OPT_IN now when cfg.Stability is
// StabilityFromEnv.
func New(cfg Config) *Tracer {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	if cfg.System == "" {
		cfg.System = "relay"
	}
	return &Tracer{
		tracer: cfg.TracerProvider.Tracer(ScopeName),
		prop:   cfg.Propagator,
		system: cfg.System,
		group:  cfg.ConsumerGroup,
		server: msgconv.Server(cfg.ServerAddress, cfg.ServerPort),
		dup:    msgconv.Resolve(cfg.Stability) == msgconv.Dup,
	}
}

// Propagator returns the propagator the Tracer reads and writes metadata
// with.
func (t *Tracer) Propagator() propagation.TextMapPropagator { return t.prop }

// attrs returns the attributes every span of operation opType on dest has.
func (t *Tracer) attrs(opType, dest string, consumer bool, extra int) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 10+extra)
	a = append(a,
		msgconv.System.String(t.system),
		msgconv.OperationType.String(opType),
		msgconv.OperationName.String(opType),
		msgconv.DestinationName.String(dest),
	)
	a = append(a, t.server...)
	if consumer && t.group != "" {
		a = append(a, msgconv.ConsumerGroup.String(t.group))
	}
	if t.dup {
		a = append(a, msgconv.OldOperation.String(msgconv.OldOperationValue(opType)))
		if consumer && t.group != "" && t.system == "kafka" {
			a = append(a, msgconv.OldKafkaGroup.String(t.group))
		}
	}
	return a
}

// fail records err on span: error.type, the exception event and the
// error status.
func fail(span trace.Span, err error) {
	if err == nil {
		return
	}
	span.SetAttributes(msgconv.ErrorType.String(msgconv.ErrorTypeOf(err)))
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// panicType is the error.type of a handler that panicked through the
// middleware (the router turns the panic into a *router.PanicError).
var panicType = msgconv.ErrorTypeOf(&router.PanicError{})

// endSpan ends span; when the handler did not return (*finished is
// false), a panic is passing through: the span is marked failed without
// recovering, so the router's *router.PanicError keeps the original stack.
func endSpan(span trace.Span, finished *bool) {
	if !*finished {
		span.SetAttributes(msgconv.ErrorType.String(panicType))
		span.SetStatus(codes.Error, "panic")
	}
	span.End()
}

// messageContext returns the creation context msg carries, or an invalid
// one.
func (t *Tracer) messageContext(ctx context.Context, msg *relay.Message) (context.Context, trace.SpanContext) {
	parent := t.prop.Extract(ctx, Carrier(msg))
	sc := trace.SpanContextFromContext(parent)
	if !sc.IsValid() || !sc.IsRemote() {
		return ctx, trace.SpanContext{}
	}
	return parent, sc
}

// Middleware starts a consumer span per handling; see the package doc.
func Middleware(cfg Config) router.Middleware { return New(cfg).Middleware }

// Middleware is router middleware that runs each handling in a consumer
// span "process TOPIC": a child of the context the message carries, also
// linked to it (a new root without one, never a child of the router's
// context). It records the handler's error (error.type, status), retry,
// poison and dedup events of the middleware inside it, and injects its
// context into every message the handler returns.
func (t *Tracer) Middleware(next router.Handler) router.Handler {
	return func(ctx context.Context, msg *relay.Message) ([]*relay.Message, error) {
		ctx, span := t.startProcess(ctx, msg)
		finished := false
		defer endSpan(span, &finished)
		outs, err := next(middleware.WithObserver(ctx, spanObserver{span}), msg)
		finished = true
		fail(span, err)
		for _, o := range outs {
			if o != nil { // the router refuses a nil output, naming it
				t.prop.Inject(ctx, Carrier(o))
			}
		}
		return outs, err
	}
}

// StartProcess starts the consumer span of handling msg as Middleware
// does, for code that handles several messages in one call but traces
// each on its own (the bridge's batches). The returned context holds the
// span and reports the middleware run under it (Retry, PoisonQueue,
// Dedup) to it; end records the handling's error and ends the span. Call
// end exactly once.
func (t *Tracer) StartProcess(ctx context.Context, msg *relay.Message) (_ context.Context, end func(error)) {
	ctx, span := t.startProcess(ctx, msg)
	return middleware.WithObserver(ctx, spanObserver{span}), func(err error) {
		fail(span, err)
		span.End()
	}
}

// startProcess starts the span "process TOPIC" of handling msg: a child
// of the context msg carries, also linked to it, or a new root.
func (t *Tracer) startProcess(ctx context.Context, msg *relay.Message) (context.Context, trace.Span) {
	topic := msg.Topic()
	if topic == "" {
		topic = router.Topic(ctx)
	}
	attrs := t.attrs("process", topic, true, 3)
	attrs = append(attrs,
		msgconv.MessageID.String(msg.ID),
		attribute.Int("relay.delivery.attempt", msg.Attempt()),
		attribute.String("relay.handler", router.HandlerName(ctx)),
	)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	parent, sc := t.messageContext(ctx, msg)
	if sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	} else {
		// The message carries no context: a new trace, not a child of
		// whatever span the router's context holds.
		opts = append(opts, trace.WithNewRoot())
	}
	return t.tracer.Start(parent, "process "+topic, opts...)
}

// BatchMiddleware runs each batch of a router batch handler in a consumer
// span "process TOPIC" with messaging.batch.message_count and one link per
// message that carries a context (the link has the message's
// messaging.message.id). The span is a new root: a batch has no single
// parent. A *router.BatchError marks the span failed and gives
// relay.batch.failed_count.
func BatchMiddleware(cfg Config) router.BatchMiddleware { return New(cfg).BatchMiddleware }

// BatchMiddleware: see the package-level BatchMiddleware.
func (t *Tracer) BatchMiddleware(next router.BatchHandler) router.BatchHandler {
	return func(ctx context.Context, msgs []*relay.Message) error {
		topic := router.Topic(ctx)
		if topic == "" && len(msgs) > 0 {
			topic = msgs[0].Topic()
		}
		attrs := t.attrs("process", topic, true, 2)
		attrs = append(attrs,
			msgconv.BatchCount.Int(len(msgs)),
			attribute.String("relay.handler", router.HandlerName(ctx)),
		)
		links := make([]trace.Link, 0, len(msgs))
		for _, m := range msgs {
			if _, sc := t.messageContext(ctx, m); sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{msgconv.MessageID.String(m.ID)}})
			}
		}
		ctx, span := t.tracer.Start(ctx, "process "+topic, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attrs...), trace.WithLinks(links...))
		finished := false
		defer endSpan(span, &finished)
		err := next(ctx, msgs)
		finished = true
		var be *router.BatchError
		if errors.As(err, &be) {
			span.SetAttributes(attribute.Int("relay.batch.failed_count", len(be.Failed)))
		}
		fail(span, err)
		return err
	}
}

// StartSend starts a producer span "send TOPIC", a child of ctx, for
// publishing msgs to topic, and writes into each message's metadata the
// creation context it carries from then on (it modifies msgs; Publisher
// passes copies). One message carries the send span's context; each of
// several gets a "create TOPIC" span of its own (its creation context),
// which the send span links. links are added to the send span: the bridge
// links the context of the message it forwards. end records the publish's
// error and ends the span; call it exactly once.
func (t *Tracer) StartSend(ctx context.Context, topic string, msgs []*relay.Message, links ...trace.Link) (_ context.Context, end func(error)) {
	attrs := t.attrs("send", topic, false, 1)
	if len(msgs) == 1 {
		attrs = append(attrs, msgconv.MessageID.String(msgs[0].ID))
	} else {
		attrs = append(attrs, msgconv.BatchCount.Int(len(msgs)))
	}
	ctx, span := t.tracer.Start(ctx, "send "+topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrs...), trace.WithLinks(links...))
	if len(msgs) == 1 {
		t.prop.Inject(ctx, Carrier(msgs[0]))
	} else {
		for _, m := range msgs {
			cattrs := append(t.attrs("create", topic, false, 1), msgconv.MessageID.String(m.ID))
			cctx, create := t.tracer.Start(ctx, "create "+topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(cattrs...))
			t.prop.Inject(cctx, Carrier(m))
			create.End()
			span.AddLink(trace.Link{SpanContext: create.SpanContext()})
		}
	}
	return ctx, func(err error) {
		fail(span, err)
		span.End()
	}
}

// Publisher wraps pub: every Publish runs in a producer span "send TOPIC"
// (a child of the span in ctx; see Tracer.StartSend) whose context is
// injected into the published messages. The caller's messages are not
// modified (copies with their own metadata are published). Close closes
// pub.
func Publisher(pub relay.Publisher, cfg Config) relay.Publisher { return New(cfg).Publisher(pub) }

// Publisher: see the package-level Publisher.
func (t *Tracer) Publisher(pub relay.Publisher) relay.Publisher {
	return &publisher{pub: pub, t: t}
}

type publisher struct {
	pub relay.Publisher
	t   *Tracer
}

// Unwrap returns the wrapped publisher.
func (p *publisher) Unwrap() relay.Publisher { return p.pub }

func (p *publisher) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	cps := make([]*relay.Message, len(msgs))
	for i, m := range msgs {
		if m == nil {
			return relay.NilMessageError(i)
		}
		cps[i] = &relay.Message{ID: m.ID, Key: m.Key, Metadata: m.Metadata.Clone(), Payload: m.Payload, DeliverAt: m.DeliverAt}
	}
	ctx, end := p.t.StartSend(ctx, topic, cps)
	err := p.pub.Publish(ctx, topic, cps...)
	end(err)
	return err
}

func (p *publisher) Close() error { return p.pub.Close() }
