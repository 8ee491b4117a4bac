package bridge_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/kafka"
	_ "github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/middleware/tracing"
	"github.com/go-relay/relay/router"
)

func spanByName(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1 (spans: %v)", len(found), name, spanNames(spans))
	}
	return found[0]
}

func spanNames(spans tracetest.SpanStubs) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name)
	}
	return n
}

// wantAttrs checks that s has every attribute of want with its value.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	got := map[string]attribute.Value{}
	for _, kv := range s.Attributes {
		got[string(kv.Key)] = kv.Value
	}
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("span %q: no attribute %s", s.Name, k)
			continue
		}
		if g.AsInterface() != v {
			t.Errorf("span %q: %s = %v, want %v", s.Name, k, g.AsInterface(), v)
		}
	}
}

// TestTraceFollowsMessageRedisBridgeKafka publishes one message to Redis,
// bridges it to Kafka and handles it with a router: the exported trace is
// checkout → send (redis) → process (bridge, redis) → send (bridge, kafka)
// → process (router, kafka), one trace ID, each consumer and the bridge's
// producer linked to the context the message carried, with the messaging
// conventions' names; the bridge's OpenTelemetry metrics count the message.
func TestTraceFollowsMessageRedisBridgeKafka(t *testing.T) {
	testenv.HoldBroker(t, "redis")
	redisURL := testenv.Redis(t)
	kURL := kafkaURL(t)
	srcTopic, dstTopic := uniq("otel-orders"), uniq("otel-orders-k")
	bridgeGroup, appGroup := uniq("otel-bridge"), uniq("otel-app")
	if opts, err := redis.ParseURL(redisURL); err == nil { // our own stream only
		c := redis.NewClient(opts)
		t.Cleanup(func() {
			c.Del(context.Background(), srcTopic)
			_ = c.Close()
		})
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	// The application on Kafka.
	sub, err := relay.OpenSubscriber(context.Background(), kURL+"?group="+appGroup)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.(relay.Provisioner).Provision(context.Background(), dstTopic); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rt.Own(sub)
	appTracer := tracing.New(tracing.Config{TracerProvider: tp, System: "kafka", ConsumerGroup: appGroup, Stability: tracing.StabilityCurrent})
	got := make(chan *relay.Message, 1)
	if err := rt.AddHandler("app", sub, dstTopic, func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		got <- m
		return nil, nil
	}, router.WithMiddleware(appTracer.Middleware)); err != nil {
		t.Fatal(err)
	}
	go func() { _ = rt.Run(context.Background()) }()
	<-rt.Running()
	stopRouter := func() {
		_ = rt.Close()
		<-rt.Done()
	}
	defer stopRouter()

	// The bridge, Redis → Kafka, traced and metered.
	provision(t, redisURL, bridgeGroup, srcTopic)
	br, err := bridge.New(bridge.Config{HTTP: bridge.HTTPConfig{Disabled: true}, Routes: []bridge.Route{{
		Name: "otel",
		From: bridge.Source{URL: redisURL, Topic: srcTopic, Group: bridgeGroup},
		To:   bridge.Destination{URL: kURL, Topic: dstTopic},
	}}}, bridge.Options{Logger: quiet, TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	stopBridge := runBridge(t, br)

	// The producer on Redis, inside a trace of its own.
	raw, err := relay.OpenPublisher(context.Background(), redisURL)
	if err != nil {
		t.Fatal(err)
	}
	pub := tracing.New(tracing.Config{TracerProvider: tp, System: tracing.SystemForURL(redisURL)}).Publisher(raw)
	defer pub.Close()
	ctx, root := tp.Tracer("test").Start(context.Background(), "checkout")
	msg := relay.NewMessage([]byte("order 42"))
	if err := pub.Publish(ctx, srcTopic, msg); err != nil {
		t.Fatal(err)
	}
	root.End()

	var delivered *relay.Message
	select {
	case delivered = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the message did not reach the Kafka handler")
	}
	if delivered.ID != msg.ID || string(delivered.Payload) != "order 42" {
		t.Fatalf("delivered %s %q, want %s %q", delivered.ID, delivered.Payload, msg.ID, "order 42")
	}
	if err := stopBridge(); err != nil {
		t.Fatalf("bridge drain: %v", err)
	}
	stopRouter()

	spans := exp.GetSpans()
	checkout := spanByName(t, spans, "checkout")
	sendRedis := spanByName(t, spans, "send "+srcTopic)
	procBridge := spanByName(t, spans, "process "+srcTopic)
	sendKafka := spanByName(t, spans, "send "+dstTopic)
	procApp := spanByName(t, spans, "process "+dstTopic)

	traceID := checkout.SpanContext.TraceID()
	for _, s := range []tracetest.SpanStub{sendRedis, procBridge, sendKafka, procApp} {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("span %q in trace %s, want %s", s.Name, s.SpanContext.TraceID(), traceID)
		}
	}
	parentIs := func(child, parent tracetest.SpanStub) {
		t.Helper()
		if child.Parent.SpanID() != parent.SpanContext.SpanID() {
			t.Errorf("span %q has parent %s, want %q (%s)", child.Name, child.Parent.SpanID(), parent.Name, parent.SpanContext.SpanID())
		}
	}
	parentIs(sendRedis, checkout)
	parentIs(procBridge, sendRedis)
	parentIs(sendKafka, procBridge)
	parentIs(procApp, sendKafka)
	linksTo := func(s, target tracetest.SpanStub) {
		t.Helper()
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != target.SpanContext.SpanID() || s.Links[0].SpanContext.TraceID() != traceID {
			t.Errorf("span %q links %v, want one link to %q (%s)", s.Name, s.Links, target.Name, target.SpanContext.SpanID())
		}
	}
	linksTo(procBridge, sendRedis) // the creation context of the message on Redis
	linksTo(sendKafka, sendRedis)  // the bridge's forward links the source message's context
	linksTo(procApp, sendKafka)    // the creation context of the forwarded message

	kinds := map[string]trace.SpanKind{
		sendRedis.Name: trace.SpanKindProducer, procBridge.Name: trace.SpanKindConsumer,
		sendKafka.Name: trace.SpanKindProducer, procApp.Name: trace.SpanKindConsumer,
	}
	for _, s := range []tracetest.SpanStub{sendRedis, procBridge, sendKafka, procApp} {
		if s.SpanKind != kinds[s.Name] {
			t.Errorf("span %q kind %v, want %v", s.Name, s.SpanKind, kinds[s.Name])
		}
	}
	wantAttrs(t, sendRedis, map[string]any{
		"messaging.system": "redis", "messaging.operation.type": "send", "messaging.operation.name": "send",
		"messaging.destination.name": srcTopic, "messaging.message.id": msg.ID,
	})
	wantAttrs(t, procBridge, withServer(redisURL, map[string]any{
		"messaging.system": "redis", "messaging.operation.type": "process", "messaging.operation.name": "process",
		"messaging.destination.name": srcTopic, "messaging.consumer.group.name": bridgeGroup, "messaging.message.id": msg.ID,
	}))
	wantAttrs(t, sendKafka, withServer(kURL, map[string]any{
		"messaging.system": "kafka", "messaging.operation.type": "send", "messaging.operation.name": "send",
		"messaging.destination.name": dstTopic, "messaging.message.id": msg.ID,
	}))
	wantAttrs(t, procApp, map[string]any{
		"messaging.system": "kafka", "messaging.operation.type": "process", "messaging.operation.name": "process",
		"messaging.destination.name": dstTopic, "messaging.consumer.group.name": appGroup, "messaging.message.id": msg.ID,
	})
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if kv.Key == "error.type" || kv.Key == "messaging.batch.message_count" || kv.Key == "messaging.operation" {
				t.Errorf("span %q has %s=%v on a successful single-message operation", s.Name, kv.Key, kv.Value.AsInterface())
			}
		}
	}
	// The forwarded message carries the bridge's send context, not the
	// Redis producer's.
	if sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), delivered, nil)); sc.SpanID() != sendKafka.SpanContext.SpanID() {
		t.Errorf("forwarded message carries span %s, want the bridge's send span %s", sc.SpanID(), sendKafka.SpanContext.SpanID())
	}

	// The bridge's OpenTelemetry metrics.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	wantMetric(t, rm, "messaging.process.duration", "s", 1, withServer(redisURL, map[string]any{
		"messaging.system": "redis", "messaging.operation.name": "process", "messaging.destination.name": srcTopic, "messaging.consumer.group.name": bridgeGroup,
	}))
	wantMetric(t, rm, "messaging.client.consumed.messages", "{message}", 1, withServer(redisURL, map[string]any{
		"messaging.system": "redis", "messaging.operation.name": "process", "messaging.destination.name": srcTopic, "messaging.consumer.group.name": bridgeGroup,
	}))
	wantMetric(t, rm, "messaging.client.operation.duration", "s", 1, withServer(kURL, map[string]any{
		"messaging.system": "kafka", "messaging.operation.name": "send", "messaging.operation.type": "send", "messaging.destination.name": dstTopic,
	}))
	wantMetric(t, rm, "messaging.client.sent.messages", "{message}", 1, withServer(kURL, map[string]any{
		"messaging.system": "kafka", "messaging.operation.name": "send", "messaging.destination.name": dstTopic,
	}))
}

// withServer returns attrs plus the server.address and server.port the
// bridge records for url (each only when the URL has it).
func withServer(url string, attrs map[string]any) map[string]any {
	host, port := tracing.ServerForURL(url)
	if host != "" {
		attrs["server.address"] = host
	}
	if port != 0 {
		attrs["server.port"] = int64(port)
	}
	return attrs
}

// wantMetric checks that rm has metric name with unit, and exactly one
// data point, whose attributes are exactly attrs and whose count (a
// histogram's) or value (a sum's) is n.
func wantMetric(t *testing.T, rm metricdata.ResourceMetrics, name, unit string, n int64, attrs map[string]any) {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			if m.Unit != unit {
				t.Errorf("%s unit %q, want %q", name, m.Unit, unit)
			}
			var sets []attribute.Set
			var counts []int64
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					sets, counts = append(sets, p.Attributes), append(counts, int64(p.Count))
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sets, counts = append(sets, p.Attributes), append(counts, p.Value)
				}
			default:
				t.Fatalf("%s has data %T", name, m.Data)
			}
			if len(sets) != 1 {
				t.Fatalf("%s has %d data points, want 1", name, len(sets))
			}
			if counts[0] != n {
				t.Errorf("%s = %d, want %d", name, counts[0], n)
			}
			if sets[0].Len() != len(attrs) {
				t.Errorf("%s attributes %v, want %v", name, sets[0].ToSlice(), attrs)
			}
			for k, v := range attrs {
				if g, ok := sets[0].Value(attribute.Key(k)); !ok || g.AsInterface() != v {
					t.Errorf("%s %s = %v, want %v", name, k, g.AsInterface(), v)
				}
			}
			return
		}
	}
	t.Errorf("no metric %s", name)
}

// A traced route is pipelined and traces each message of a batch on its
// own, as the per-message path does: one "process in" span per delivery,
// a child of the context the message carries and linked to it; one "send
// out" span per publish attempt of its copy, a child of that process span
// and linked to the source context, whose context the forwarded copy
// carries. A copy that failed in its batch is retried under the same
// process span (a retry event); a later duplicate has a process span of
// its own with a deduplicated event, and sends nothing.
func TestPipelineTracesEachMessage(t *testing.T) {
	const total = 40
	a, dst := "mem://"+uniq("a"), uniq("b")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name:        "traced",
		From:        bridge.Source{URL: a, Topic: "in", Group: "bridge"},
		To:          bridge.Destination{URL: flakyScheme + "://" + dst, Topic: "out"},
		Concurrency: 100,
		Batch:       50,
		Retry:       &bridge.Retry{MaxAttempts: 5, InitialInterval: time.Millisecond},
		Dedup:       &bridge.Dedup{},
	}}}, bridge.Options{Logger: quiet, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	if !bridge.Pipelined(br, 0) {
		t.Fatal("the traced route does not take the pipelined path")
	}
	provision(t, a, "bridge", "in")
	provision(t, "mem://"+dst, "reader", "out")
	raw, err := relay.OpenPublisher(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var in []*relay.Message
	flakyID := ""
	for i := range total {
		payload := "ok " + strconv.Itoa(i)
		if i == 7 {
			payload = "flaky " + strconv.Itoa(i)
		}
		m := relay.NewMessage([]byte(payload))
		if i == 7 {
			flakyID = m.ID
		}
		in = append(in, m)
	}
	pub := tracing.New(tracing.Config{TracerProvider: tp, System: tracing.SystemForURL(a)}).Publisher(raw)
	// One producer call for all: each message gets a "create in" span of
	// its own, which is the context it carries.
	if err := pub.Publish(context.Background(), "in", in...); err != nil {
		t.Fatal(err)
	}
	sent := exp.GetSpans()
	create := map[string]tracetest.SpanStub{}
	for _, s := range sent {
		if s.Name == "create in" {
			for _, kv := range s.Attributes {
				if kv.Key == "messaging.message.id" {
					create[kv.Value.AsString()] = s
				}
			}
		}
	}
	if len(create) != total {
		t.Fatalf("%d create spans, want %d", len(create), total)
	}
	stop := runBridge(t, br)
	got := consume(t, "mem://"+dst, "reader", "out", total)
	waitRoute(t, br, 0, "every message settled", func(rs bridge.RouteStatus) bool { return rs.Forwarded == total })
	waitLagOf(t, a, "bridge", "in", 0)
	// A duplicate of the first, carrying the same context: a delivery of
	// its own, acked as a duplicate under its own process span.
	dup := in[0].Copy()
	if err := raw.Publish(context.Background(), "in", dup); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, br, 0, "the duplicate settled", func(rs bridge.RouteStatus) bool { return rs.Duplicates == 1 })
	waitLagOf(t, a, "bridge", "in", 0)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	idOf := func(s tracetest.SpanStub) string {
		for _, kv := range s.Attributes {
			if kv.Key == "messaging.message.id" {
				return kv.Value.AsString()
			}
		}
		return ""
	}
	process := map[string][]tracetest.SpanStub{}
	sends := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "process in":
			process[idOf(s)] = append(process[idOf(s)], s)
		case "send out":
			sends[idOf(s)] = append(sends[idOf(s)], s)
		}
	}
	carried := map[string]trace.SpanID{}
	for _, m := range got {
		carried[m.ID] = trace.SpanContextFromContext(tracing.Extract(context.Background(), m, nil)).SpanID()
	}
	for _, m := range in {
		c := create[m.ID]
		ps := process[m.ID]
		if m.ID == dup.ID {
			if len(ps) != 2 || len(ps[1].Events) != 1 || ps[1].Events[0].Name != "deduplicated" {
				t.Fatalf("%s: process spans %v; want 2, the second with a deduplicated event", m.Payload, ps)
			}
			ps = ps[:1]
		}
		if len(ps) != 1 {
			t.Fatalf("%s: %d process spans, want 1", m.Payload, len(ps))
		}
		p := ps[0]
		if p.Parent.SpanID() != c.SpanContext.SpanID() || len(p.Links) != 1 || p.Links[0].SpanContext.SpanID() != c.SpanContext.SpanID() {
			t.Errorf("%s: process span parent %s, links %v; want child of and linked to %s", m.Payload, p.Parent.SpanID(), p.Links, c.SpanContext.SpanID())
		}
		if p.Status.Code == codes.Error {
			t.Errorf("%s: process span failed: %s", m.Payload, p.Status.Description)
		}
		want, retries := 1, 0
		if m.ID == flakyID {
			want, retries = 3, 1 // in the batch, then alone twice
		}
		ss := sends[m.ID]
		if len(ss) != want {
			t.Fatalf("%s: %d send spans, want %d", m.Payload, len(ss), want)
		}
		for _, s := range ss {
			if s.Parent.SpanID() != p.SpanContext.SpanID() || len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != c.SpanContext.SpanID() {
				t.Errorf("%s: send span parent %s, links %v; want child of the process span %s, linked to %s",
					m.Payload, s.Parent.SpanID(), s.Links, p.SpanContext.SpanID(), c.SpanContext.SpanID())
			}
		}
		slices.SortFunc(ss, func(x, y tracetest.SpanStub) int { return x.EndTime.Compare(y.EndTime) })
		for i, s := range ss {
			if failed := i < len(ss)-1; (s.Status.Code == codes.Error) != failed {
				t.Errorf("%s: send span %d of %d has status %v, want failed %v", m.Payload, i+1, len(ss), s.Status, failed)
			}
		}
		last := ss[len(ss)-1]
		if carried[m.ID] != last.SpanContext.SpanID() {
			t.Errorf("%s: the forwarded copy carries span %s, want its last send span %s", m.Payload, carried[m.ID], last.SpanContext.SpanID())
		}
		n := 0
		for _, ev := range p.Events {
			if ev.Name == "retry" {
				n++
			}
		}
		if n != retries {
			t.Errorf("%s: %d retry events, want %d", m.Payload, n, retries)
		}
	}
	flaky.Lock()
	calls := flaky.calls[dst]
	flaky.Unlock()
	if most := slices.Max(calls); most < 2 {
		t.Fatalf("Publish calls %v; want batches", calls)
	}
}

// TestCopiesOfBareMessages forwards messages that carry no metadata, whose
// copies share one hop-only map when no tracer writes into them, beside
// one message with metadata, whose copy gets a map of its own: without a
// tracer each bare copy arrives with exactly the hop marker, the same
// source hop as the other message's; with one, each carries its own send
// span's context (a shared map would give them all the last one injected,
// and race). The copies must have travelled in batches, several to a
// Publish call, for the check to mean anything.
func TestCopiesOfBareMessages(t *testing.T) {
	const total = 30
	for _, traced := range []bool{false, true} {
		t.Run("traced="+strconv.FormatBool(traced), func(t *testing.T) {
			a, b := "mem://"+uniq("a"), uniq("b")
			opts := bridge.Options{Logger: quiet}
			var exp *tracetest.InMemoryExporter
			if traced {
				exp = tracetest.NewInMemoryExporter()
				tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				opts.TracerProvider = tp
			}
			br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
				Name: "bare",
				From: bridge.Source{URL: a, Topic: "in", Group: "bridge"},
				To:   bridge.Destination{URL: flakyScheme + "://" + b, Topic: "out"},
			}}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !bridge.Pipelined(br, 0) {
				t.Fatal("the route does not take the pipelined path")
			}
			provision(t, a, "bridge", "in")
			provision(t, "mem://"+b, "reader", "out")
			pub, err := relay.OpenPublisher(context.Background(), a)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			var in []*relay.Message
			for i := range total {
				in = append(in, relay.NewMessage([]byte(strconv.Itoa(i))))
			}
			with := relay.NewMessage([]byte("with"))
			with.Metadata = relay.Metadata{"x": "y"}
			if err := pub.Publish(context.Background(), "in", append(in, with)...); err != nil {
				t.Fatal(err)
			}
			stop := runBridge(t, br)
			got := consume(t, "mem://"+b, "reader", "out", total+1)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			hop := ""
			for _, m := range got {
				if m.ID == with.ID {
					hop = m.Metadata[bridge.HopsKey]
					if m.Metadata["x"] != "y" {
						t.Errorf("the message with metadata arrived with %v", m.Metadata)
					}
				}
			}
			if hop == "" {
				t.Fatal("the message with metadata arrived without the hop marker")
			}
			spans := map[trace.SpanID]string{}
			for _, m := range got {
				if m.ID == with.ID {
					continue
				}
				if m.Metadata[bridge.HopsKey] != hop {
					t.Errorf("%s carries hops %q, the message with metadata %q", m.Payload, m.Metadata[bridge.HopsKey], hop)
				}
				if !traced {
					if len(m.Metadata) != 1 {
						t.Errorf("%s arrived with metadata %v, want the hop marker alone", m.Payload, m.Metadata)
					}
					continue
				}
				sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), m, nil))
				if !sc.IsValid() {
					t.Fatalf("%s arrived without a span context: %v", m.Payload, m.Metadata)
				}
				if other, ok := spans[sc.SpanID()]; ok {
					t.Errorf("%s and %s carry the same span %s", m.Payload, other, sc.SpanID())
				}
				spans[sc.SpanID()] = string(m.Payload)
			}
			if traced {
				sends := 0
				for _, s := range exp.GetSpans() {
					if _, ok := spans[s.SpanContext.SpanID()]; ok && s.Name == "send out" {
						sends++
					}
				}
				if sends != total {
					t.Errorf("%d of the carried span contexts are send spans, want %d", sends, total)
				}
			}
			flaky.Lock()
			calls := flaky.calls[b]
			flaky.Unlock()
			if len(calls) == 0 || slices.Max(calls) < 2 {
				t.Fatalf("Publish calls %v; want batches", calls)
			}
		})
	}
}
