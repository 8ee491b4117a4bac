package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/middleware/tracing"
	"github.com/go-relay/relay/router"
)

func attrMap(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func checkAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]any, absent ...string) {
	t.Helper()
	got := attrMap(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("span %q: %s = %v, want %v", s.Name(), k, got[k], v)
		}
	}
	for _, k := range absent {
		if v, ok := got[k]; ok {
			t.Errorf("span %q: %s = %v, want no such attribute", s.Name(), k, v)
		}
	}
}

func spansNamed(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func newTP(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// A single-message publish and its handling carry the convention's
// attributes; the process span is a child of the send span and linked to
// it; a failed handling has error.type.
func TestConventionAttributesSingleMessage(t *testing.T) {
	tp, sr := newTP(t)
	pubT := tracing.New(tracing.Config{TracerProvider: tp, System: "kafka", ServerAddress: "k1", ServerPort: 9092, Stability: tracing.StabilityCurrent})
	subT := tracing.New(tracing.Config{TracerProvider: tp, System: "kafka", ConsumerGroup: "billing", Stability: tracing.StabilityCurrent})
	var carried *relay.Message
	rec := &recordingPub{}
	if err := pubT.Publisher(rec).Publish(context.Background(), "orders", &relay.Message{ID: "id-1"}); err != nil {
		t.Fatal(err)
	}
	carried = rec.msgs[0]
	h := subT.Middleware(func(context.Context, *relay.Message) ([]*relay.Message, error) {
		return nil, fmt.Errorf("handler: %w", relay.ErrLimit)
	})
	if _, err := h(router.WithHandlerInfo(context.Background(), "h", "orders"), carried); !errors.Is(err, relay.ErrLimit) {
		t.Fatalf("handler error %v", err)
	}
	send, proc := spanNamed(t, sr, "send orders"), spanNamed(t, sr, "process orders")
	if send.SpanKind() != trace.SpanKindProducer || proc.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("kinds %v %v", send.SpanKind(), proc.SpanKind())
	}
	checkAttrs(t, send, map[string]any{
		"messaging.system": "kafka", "messaging.operation.type": "send", "messaging.operation.name": "send",
		"messaging.destination.name": "orders", "messaging.message.id": "id-1", "server.address": "k1", "server.port": int64(9092),
	}, "messaging.batch.message_count", "messaging.consumer.group.name", "error.type", "messaging.operation")
	checkAttrs(t, proc, map[string]any{
		"messaging.system": "kafka", "messaging.operation.type": "process", "messaging.operation.name": "process",
		"messaging.destination.name": "orders", "messaging.consumer.group.name": "billing", "messaging.message.id": "id-1",
		"error.type": "relay.ErrLimit",
	}, "messaging.batch.message_count", "messaging.operation", "messaging.kafka.consumer.group", "server.address")
	if proc.Parent().SpanID() != send.SpanContext().SpanID() {
		t.Fatal("process span is not a child of the send span")
	}
	if l := proc.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Fatalf("process span links %v, want the send span", l)
	}
}

// recordingPub keeps what it is given.
type recordingPub struct{ msgs []*relay.Message }

func (p *recordingPub) Publish(_ context.Context, _ string, msgs ...*relay.Message) error {
	p.msgs = append(p.msgs, msgs...)
	return nil
}
func (p *recordingPub) Close() error { return nil }

// A batch publish gets one "create" span per message, each message
// carries its own create span's context, and the send span has the batch
// count and links every create span.
func TestBatchPublishCreatesOneContextPerMessage(t *testing.T) {
	tp, sr := newTP(t)
	rec := &recordingPub{}
	pub := tracing.New(tracing.Config{TracerProvider: tp, System: "rabbitmq", Stability: tracing.StabilityCurrent}).Publisher(rec)
	in := []*relay.Message{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	if err := pub.Publish(context.Background(), "jobs", in...); err != nil {
		t.Fatal(err)
	}
	send := spanNamed(t, sr, "send jobs")
	checkAttrs(t, send, map[string]any{"messaging.batch.message_count": int64(3), "messaging.system": "rabbitmq"}, "messaging.message.id")
	creates := spansNamed(sr, "create jobs")
	if len(creates) != 3 {
		t.Fatalf("%d create spans, want 3", len(creates))
	}
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, c := range creates {
		checkAttrs(t, c, map[string]any{"messaging.operation.type": "create", "messaging.operation.name": "create"})
		byID[attrMap(c)["messaging.message.id"].(string)] = c
		if c.Parent().SpanID() != send.SpanContext().SpanID() || c.SpanKind() != trace.SpanKindProducer {
			t.Errorf("create span %v: parent/kind", c.SpanContext().SpanID())
		}
	}
	linked := map[trace.SpanID]bool{}
	for _, l := range send.Links() {
		linked[l.SpanContext.SpanID()] = true
	}
	for _, m := range rec.msgs {
		sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), m, nil))
		c := byID[m.ID]
		if c == nil || sc.SpanID() != c.SpanContext().SpanID() {
			t.Errorf("message %s carries span %s, want its create span", m.ID, sc.SpanID())
			continue
		}
		if !linked[sc.SpanID()] {
			t.Errorf("send span does not link the create span of %s", m.ID)
		}
	}
	for _, m := range in {
		if m.Metadata != nil {
			t.Fatal("Publisher modified the caller's messages")
		}
	}
}

// A batch handler's process span has the batch count and one link per
// message (with its ID), is a new root and records a *router.BatchError.
func TestBatchMiddlewareLinksEveryMessage(t *testing.T) {
	tp, sr := newTP(t)
	broker := "tracebatch-" + relay.NewID()
	raw := memory.NewPublisher(broker, memory.PublisherConfig{})
	defer raw.Close()
	sub, _ := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "g"})
	if err := sub.(relay.Provisioner).Provision(context.Background(), "rows"); err != nil {
		t.Fatal(err)
	}
	pub := tracing.New(tracing.Config{TracerProvider: tp, System: "relay.memory"}).Publisher(raw)
	var ids []string
	for i := range 3 {
		m := relay.NewMessage([]byte{byte(i)})
		ids = append(ids, m.ID)
		// each message in a trace of its own
		if err := pub.Publish(context.Background(), "rows", m); err != nil {
			t.Fatal(err)
		}
	}
	bt := tracing.New(tracing.Config{TracerProvider: tp, System: "relay.memory", ConsumerGroup: "g", Stability: tracing.StabilityCurrent})
	r, _ := router.New(router.Config{Logger: slog.New(slog.DiscardHandler)})
	r.Own(sub)
	_ = r.UseBatch(bt.BatchMiddleware)
	done := make(chan struct{})
	var once bool
	_ = r.AddBatchHandler("bulk", sub, "rows", func(_ context.Context, msgs []*relay.Message) error {
		if once {
			return nil
		}
		once = true
		defer close(done)
		return &router.BatchError{Failed: map[string]error{msgs[1].ID: errors.New("bad row")}}
	}, router.WithBatchSize(3), router.WithBatchWait(5*time.Second))
	runCtx, unrelated := tp.Tracer("test").Start(context.Background(), "unrelated")
	go func() { _ = r.Run(runCtx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("batch not handled")
	}
	_ = r.Close()
	<-r.Done()
	unrelated.End()

	procs := spansNamed(sr, "process rows")
	if len(procs) < 1 {
		t.Fatal("no process span")
	}
	p := procs[0]
	if p.SpanKind() != trace.SpanKindConsumer || p.Parent().IsValid() {
		t.Fatalf("batch span kind %v parent %v: want a consumer root", p.SpanKind(), p.Parent())
	}
	checkAttrs(t, p, map[string]any{
		"messaging.system": "relay.memory", "messaging.operation.type": "process", "messaging.operation.name": "process",
		"messaging.destination.name": "rows", "messaging.consumer.group.name": "g", "messaging.batch.message_count": int64(3),
		"error.type": "*github.com/go-relay/relay/router.BatchError", "relay.batch.failed_count": int64(1),
	}, "messaging.message.id")
	sends := map[string]trace.SpanContext{}
	for _, s := range spansNamed(sr, "send rows") {
		sends[attrMap(s)["messaging.message.id"].(string)] = s.SpanContext()
	}
	if len(p.Links()) != 3 {
		t.Fatalf("%d links, want 3", len(p.Links()))
	}
	for i, l := range p.Links() {
		var id string
		for _, kv := range l.Attributes {
			if kv.Key == "messaging.message.id" {
				id = kv.Value.AsString()
			}
		}
		if id != ids[i] || l.SpanContext.SpanID() != sends[id].SpanID() || l.SpanContext.TraceID() != sends[id].TraceID() {
			t.Errorf("link %d: message %q span %s, want message %s and its send span", i, id, l.SpanContext.SpanID(), ids[i])
		}
	}
}

// messaging/dup adds the v1.24 names (messaging.operation with publish and
// deliver, messaging.kafka.consumer.group) and keeps the current ones and
// the span names; the env var is read when the Tracer is created.
func TestStabilityOptIn(t *testing.T) {
	for _, tc := range []struct {
		env string
		dup bool
	}{
		{"", false},
		{"messaging", false},
		{"http, messaging/dup", true},
		{"messaging,messaging/dup", true},
		{"database/dup", false},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("OTEL_SEMCONV_STABILITY_OPT_IN", tc.env)
			tp, sr := newTP(t)
			tr := tracing.New(tracing.Config{TracerProvider: tp, System: "kafka", ConsumerGroup: "g"})
			rec := &recordingPub{}
			if err := tr.Publisher(rec).Publish(context.Background(), "t", &relay.Message{ID: "x"}); err != nil {
				t.Fatal(err)
			}
			_, _ = tr.Middleware(func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil })(
				router.WithHandlerInfo(context.Background(), "h", "t"), rec.msgs[0])
			send, proc := spanNamed(t, sr, "send t"), spanNamed(t, sr, "process t")
			checkAttrs(t, send, map[string]any{"messaging.operation.type": "send"})
			checkAttrs(t, proc, map[string]any{"messaging.operation.type": "process", "messaging.consumer.group.name": "g"})
			if tc.dup {
				checkAttrs(t, send, map[string]any{"messaging.operation": "publish"})
				checkAttrs(t, proc, map[string]any{"messaging.operation": "deliver", "messaging.kafka.consumer.group": "g"})
			} else {
				checkAttrs(t, send, nil, "messaging.operation")
				checkAttrs(t, proc, nil, "messaging.operation", "messaging.kafka.consumer.group")
			}
		})
	}
}

type codeError struct{ code int }

func (e codeError) Error() string { return fmt.Sprint("code ", e.code) }

func TestErrorTypeAndSystemForURL(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("plain"), "_OTHER"},
		{fmt.Errorf("publish: %w", relay.ErrMessageTooLarge), "relay.ErrMessageTooLarge"},
		{relay.Permanent(fmt.Errorf("x: %w", codeError{7})), "github.com/go-relay/relay/middleware/tracing_test.codeError"},
		{&router.PanicError{Value: 1}, "*github.com/go-relay/relay/router.PanicError"},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), "context.DeadlineExceeded"},
	} {
		if got := tracing.ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	for url, want := range map[string]string{
		"kafka://h:9092": "kafka", "amqp://u:p@h/": "rabbitmq", "amqps://h": "rabbitmq", "sqs://?region=x": "aws_sqs",
		"sns://?region=x": "aws.sns", "nats://h:4222": "nats", "redis://h:6379/0": "redis", "rediss://h": "redis",
		"postgres://h/db": "postgresql", "sqlite://./relay.db": "sqlite", "mem://x": "relay.memory", "gcppubsub://p": "gcp_pubsub", "mqtt://h:1883": "mqtt", "mqtts://h": "mqtt", "custom://h": "custom",
	} {
		if got := tracing.SystemForURL(url); got != want {
			t.Errorf("SystemForURL(%s) = %q, want %q", url, got, want)
		}
	}
	for url, want := range map[string]string{
		"kafka://k1:9092?seed=k2:9092": "k1:9092", "amqp://u:p@rabbit:5672/": "rabbit:5672", "redis://r/0": "r:0",
		"sqs://?region=x": ":0", "mem://name": ":0", "sqlite://data/relay.db": ":0", "gcppubsub://project?emulator=h:1": ":0", "::bad": ":0",
	} {
		if h, p := tracing.ServerForURL(url); fmt.Sprintf("%s:%d", h, p) != want {
			t.Errorf("ServerForURL(%s) = %s:%d, want %s", url, h, p, want)
		}
	}
}

// A panic passes through the middleware unrecovered, and the span ends
// failed with the router's panic error type.
func TestPanicPassesThroughAndFailsSpan(t *testing.T) {
	tp, sr := newTP(t)
	h := tracing.New(tracing.Config{TracerProvider: tp}).Middleware(func(context.Context, *relay.Message) ([]*relay.Message, error) {
		panic("boom")
	})
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want the handler's panic", v)
			}
		}()
		_, _ = h(router.WithHandlerInfo(context.Background(), "h", "t"), &relay.Message{ID: "p"})
	}()
	s := spanNamed(t, sr, "process t")
	checkAttrs(t, s, map[string]any{"error.type": "*github.com/go-relay/relay/router.PanicError", "messaging.system": "relay"})
	if s.Status().Code != codes.Error {
		t.Fatalf("status %v", s.Status())
	}
}

// The traced publisher publishes copies that keep everything the caller
// set, DeliverAt included, and refuses a nil message by its index without
// passing the batch on.
func TestPublisherCopiesAndNil(t *testing.T) {
	tp, _ := newTP(t)
	rec := &recordingPub{}
	pub := tracing.New(tracing.Config{TracerProvider: tp}).Publisher(rec)
	due := time.Now().Add(time.Hour)
	in := &relay.Message{ID: "a", Key: "k", Payload: []byte("p"), DeliverAt: due}
	if err := pub.Publish(context.Background(), "jobs", in); err != nil {
		t.Fatal(err)
	}
	if len(rec.msgs) != 1 || rec.msgs[0] == in || !rec.msgs[0].DeliverAt.Equal(due) || rec.msgs[0].Key != "k" || string(rec.msgs[0].Payload) != "p" {
		t.Fatalf("published %+v, want a copy of %+v", rec.msgs, in)
	}
	err := pub.Publish(context.Background(), "jobs", &relay.Message{ID: "b"}, nil)
	if !errors.Is(err, relay.ErrNilMessage) || !strings.Contains(err.Error(), "index 1") {
		t.Errorf("Publish with a nil message = %v, want relay.ErrNilMessage naming index 1", err)
	}
	if len(rec.msgs) != 1 {
		t.Errorf("%d message(s) passed on from a batch holding a nil message", len(rec.msgs)-1)
	}
}
