package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware/tracing"
	"github.com/go-relay/relay/router"
)

// BenchmarkMiddleware compares a handler called bare with the same
// handler inside Tracer.Middleware on an SDK provider that samples every
// span (no exporter), for a message that carries a trace context. Run:
//
//	go test -run '^$' -bench BenchmarkMiddleware -benchtime 2000x -count 3 ./middleware/tracing
func BenchmarkMiddleware(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tracing.New(tracing.Config{TracerProvider: tp, System: "kafka", ConsumerGroup: "g", Stability: tracing.StabilityCurrent})
	msg := &relay.Message{ID: relay.NewID()}
	ctx, span := tp.Tracer("bench").Start(context.Background(), "root")
	tracing.Inject(ctx, msg, nil)
	span.End()
	h := func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil }
	hctx := router.WithHandlerInfo(context.Background(), "h", "orders")
	for _, c := range []struct {
		name string
		h    router.Handler
	}{{"bare", h}, {"traced", tr.Middleware(h)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.h(hctx, msg)
			}
		})
	}
}
