package tracing_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/middleware/tracing"
	"github.com/go-relay/relay/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func spanNamed(t *testing.T, sr *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range sr.Ended() {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no span %q", name)
	return nil
}

// A trace started by a publisher continues through two router hops on a
// broker, carried only by message metadata.
func TestTraceContinuesAcrossHops(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	cfg := tracing.Config{TracerProvider: tp}

	broker := "trace-" + relay.NewID()
	raw := memory.NewPublisher(broker, memory.PublisherConfig{})
	pub := tracing.Publisher(raw, cfg)
	defer pub.Close()
	subA, _ := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "a"})
	subB, _ := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "b"})

	r, _ := router.New(router.Config{Logger: slog.New(slog.DiscardHandler)})
	r.Own(subA, subB)
	_ = r.Use(tracing.Middleware(cfg))
	var traceparent string
	_ = r.AddHandler("a", subA, "orders", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		return []*relay.Message{relay.NewMessage([]byte("email for " + m.ID))}, nil
	}, router.WithOutput(raw, "emails"))
	done := make(chan struct{})
	_ = r.AddHandler("b", subB, "emails", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		traceparent = m.Metadata.Get("traceparent")
		close(done)
		return nil, nil
	})
	// The router's own context carries an unrelated span: it must not
	// become the parent of message spans.
	runCtx, unrelated := tp.Tracer("test").Start(context.Background(), "unrelated")
	errc := make(chan error, 1)
	go func() { errc <- r.Run(runCtx) }()
	<-r.Running()

	ctx, root := tp.Tracer("test").Start(context.Background(), "checkout")
	msg := relay.NewMessage([]byte("order"))
	if err := pub.Publish(ctx, "orders", msg); err != nil {
		t.Fatal(err)
	}
	root.End()
	if msg.Metadata != nil {
		t.Fatal("Publisher modified the caller's message")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("second hop not reached")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	<-errc
	unrelated.End()

	send := spanNamed(t, sr, "send orders")
	procA := spanNamed(t, sr, "process orders")
	procB := spanNamed(t, sr, "process emails")
	rootSC := spanNamed(t, sr, "checkout").SpanContext()
	for _, s := range []sdktrace.ReadOnlySpan{send, procA, procB} {
		if s.SpanContext().TraceID() != rootSC.TraceID() {
			t.Fatalf("%s in trace %s, want %s", s.Name(), s.SpanContext().TraceID(), rootSC.TraceID())
		}
	}
	if send.Parent().SpanID() != rootSC.SpanID() || procA.Parent().SpanID() != send.SpanContext().SpanID() || procB.Parent().SpanID() != procA.SpanContext().SpanID() {
		t.Fatal("parent chain checkout → send → process orders → process emails broken")
	}
	if !procA.Parent().IsRemote() || procA.SpanKind() != trace.SpanKindConsumer || send.SpanKind() != trace.SpanKindProducer {
		t.Fatal("span kinds / remote parent")
	}
	if !regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`).MatchString(traceparent) {
		t.Fatalf("traceparent %q is not W3C", traceparent)
	}
}

func TestNoContextStartsNewRootAndRecordsEvents(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	noWait := func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}
	retry, _ := middleware.Retry(middleware.RetryConfig{MaxAttempts: 2, After: noWait})
	h := router.Chain(tracing.Middleware(tracing.Config{TracerProvider: tp}), retry)(func(context.Context, *relay.Message) ([]*relay.Message, error) {
		return nil, errors.New("declined")
	})
	ctx, outer := tp.Tracer("test").Start(router.WithHandlerInfo(context.Background(), "h", "payments"), "outer")
	_, err := h(ctx, relay.NewMessage(nil))
	outer.End()
	if err == nil {
		t.Fatal("no error")
	}
	s := spanNamed(t, sr, "process payments")
	if s.Parent().IsValid() {
		t.Fatal("span without a message context has a parent")
	}
	if s.Status().Code != codes.Error {
		t.Fatalf("status %v", s.Status())
	}
	var retries int
	for _, ev := range s.Events() {
		if ev.Name == "retry" {
			retries++
		}
	}
	if retries != 1 {
		t.Fatalf("%d retry events, want 1", retries)
	}
}
