package router_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// deliveries counts handler calls per payload and whether the message was
// already settled (acked) when the handler ran.
type deliveries struct {
	mu      sync.Mutex
	calls   map[string]int
	settled map[string]bool
	ctxDone map[string]bool
	seen    chan struct{}
}

func newDeliveries() *deliveries {
	return &deliveries{calls: map[string]int{}, settled: map[string]bool{}, ctxDone: map[string]bool{}, seen: make(chan struct{}, 1024)}
}

func (d *deliveries) record(m *relay.Message) {
	d.mu.Lock()
	p := string(m.Payload)
	d.calls[p]++
	d.settled[p] = m.Settled()
	d.ctxDone[p] = m.Context().Err() != nil
	d.mu.Unlock()
	select {
	case d.seen <- struct{}{}:
	default: // far more calls than any test waits for
	}
}

func (d *deliveries) count(p string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[p]
}

// waitCalls waits for n handler calls in all.
func (d *deliveries) waitCalls(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-d.seen:
		case <-time.After(10 * time.Second):
			t.Fatalf("handler calls: %v; want %d in all", d.calls, n)
		}
	}
}

// waitLag waits until the group of sub has nothing left of topic: nothing
// ready, waiting out a nack delay or delivered and unsettled. After that
// the memory broker cannot redeliver anything.
func waitLag(t *testing.T, sub relay.Subscriber, topic string, want int64) {
	t.Helper()
	lr := sub.(relay.LagReporter)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := lr.Lag(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag of %s is %d; want %d", topic, n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func publish(t *testing.T, pub relay.Publisher, topic string, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		if err := pub.Publish(context.Background(), topic, relay.NewMessage([]byte(p))); err != nil {
			t.Fatal(err)
		}
	}
}

// failing fails on "fail", panics on "panic" and succeeds otherwise.
func failing(d *deliveries) router.Handler {
	return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		d.record(m)
		switch string(m.Payload) {
		case "fail":
			return nil, errors.New("handler failed")
		case "panic":
			panic("handler panicked")
		}
		return []*relay.Message{relay.NewMessage(append([]byte("out-"), m.Payload...))}, nil
	}
}

func TestAtMostOnceLosesFailuresAndAcksFirst(t *testing.T) {
	pub, sub := memPair(t, "amo-router", "g", 16)
	out := newFakePub()
	d := newDeliveries()
	r := newRouter(t, router.Config{RedeliveryDelay: router.NoRedeliveryDelay})
	if err := r.AddHandler("h", sub, "in", failing(d),
		router.WithGuarantee(relay.AtMostOnce), router.WithOutput(out, "out")); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "in", "fail", "panic", "ok")
	stop := runRouter(t, r)
	d.waitCalls(t, 3)
	// Nothing is left for the group: the failed and the panicked message
	// were acked, so the broker will never redeliver them.
	waitLag(t, sub, "in", 0)
	for _, p := range []string{"fail", "panic", "ok"} {
		if n := d.count(p); n != 1 {
			t.Errorf("%s handled %d times; want once", p, n)
		}
		if !d.settled[p] || !d.ctxDone[p] {
			t.Errorf("%s: settled %v, m.Context() done %v when the handler ran; want the ack first", p, d.settled[p], d.ctxDone[p])
		}
	}
	// Outputs are published once, and only for the handler that succeeded.
	// The router publishes an output after its handler returns, so the
	// handler's call being recorded does not mean the output is out yet.
	// Stopping the router waits for the handlers' work, so whatever the
	// failed messages might wrongly have published is out too.
	waitOutputs(t, out, "out", 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := outPayloads(out, "out"); !slices.Equal(got, []string{"out-ok"}) {
		t.Fatalf("outputs %v; want [out-ok]", got)
	}
}

// waitOutputs waits until p holds at least n messages of topic.
func waitOutputs(t *testing.T, p *fakePub, topic string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(p.published(topic)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d outputs after 10s; want %d", topic, len(p.published(topic)), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// outPayloads returns the payloads p got for topic.
func outPayloads(p *fakePub, topic string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var got []string
	for _, m := range p.msgs[topic] {
		got = append(got, string(m.Payload))
	}
	slices.Sort(got)
	return got
}

func TestAtMostOnceFailedOutputIsLost(t *testing.T) {
	_, sub := memPair(t, "amo-outfail", "g", 16)
	pub, _ := memPair(t, "amo-outfail", "g2", 16)
	out := newFakePub()
	out.fail = errors.New("destination down")
	d := newDeliveries()
	r := newRouter(t, router.Config{RedeliveryDelay: router.NoRedeliveryDelay})
	if err := r.AddHandler("h", sub, "in", failing(d),
		router.WithGuarantee(relay.AtMostOnce), router.WithOutput(out, "out")); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "in", "a")
	runRouter(t, r)
	d.waitCalls(t, 1)
	waitLag(t, sub, "in", 0)
	if n := d.count("a"); n != 1 {
		t.Fatalf("handled %d times; want once", n)
	}
}

func TestAtLeastOnceRedeliversFailures(t *testing.T) {
	pub, sub := memPair(t, "alo-router", "g", 16)
	d := newDeliveries()
	var once sync.Once
	h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		d.record(m)
		var err error
		once.Do(func() { err = errors.New("first attempt fails") })
		return nil, err
	}
	r := newRouter(t, router.Config{RedeliveryDelay: router.NoRedeliveryDelay})
	if err := r.AddHandler("h", sub, "in", h, router.WithGuarantee(relay.AtLeastOnce)); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "in", "x")
	runRouter(t, r)
	d.waitCalls(t, 2)
	waitLag(t, sub, "in", 0)
	if n := d.count("x"); n != 2 {
		t.Fatalf("handled %d times; want 2 (one failure, one redelivery)", n)
	}
	if d.settled["x"] {
		t.Fatal("at-least-once message was settled before the handler ran")
	}
}

func TestAtMostOnceBatchLosesFailedBatch(t *testing.T) {
	pub, sub := memPair(t, "amo-batch", "g", 16)
	d := newDeliveries()
	h := func(ctx context.Context, msgs []*relay.Message) error {
		for _, m := range msgs {
			d.record(m)
		}
		if len(msgs) == 0 {
			return nil
		}
		panic("batch handler panicked")
	}
	r := newRouter(t, router.Config{RedeliveryDelay: router.NoRedeliveryDelay})
	if err := r.AddBatchHandler("b", sub, "in", h,
		router.WithBatchGuarantee(relay.AtMostOnce), router.WithBatchWait(0)); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "in", "1", "2", "3")
	runRouter(t, r)
	d.waitCalls(t, 3)
	waitLag(t, sub, "in", 0)
	for _, p := range []string{"1", "2", "3"} {
		if n := d.count(p); n != 1 || !d.settled[p] {
			t.Errorf("%s: handled %d times, settled before %v; want once, acked first", p, n, d.settled[p])
		}
	}
}

func TestAtMostOnceRefusesRetry(t *testing.T) {
	_, sub := memPair(t, "amo-retry", "g", 16)
	retry, err := middleware.Retry(middleware.RetryConfig{MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	nop := func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil }
	amo := router.WithGuarantee(relay.AtMostOnce)

	r := newRouter(t, router.Config{})
	err = r.AddHandler("h", sub, "in", nop, amo, router.WithMiddleware(middleware.Recoverer, retry))
	if err == nil || !strings.Contains(err.Error(), "at-most-once") || !strings.Contains(err.Error(), "middleware 1 retries") {
		t.Fatalf("AddHandler with Retry: %v; want a refusal that names the retry and at-most-once", err)
	}

	r = newRouter(t, router.Config{})
	if err := r.Use(retry); err != nil {
		t.Fatal(err)
	}
	if err := r.AddHandler("h", sub, "in", nop, amo); err == nil || !strings.Contains(err.Error(), "router middleware 0 retries") {
		t.Fatalf("AddHandler after Use(Retry): %v; want a refusal", err)
	}

	r = newRouter(t, router.Config{})
	if err := r.AddHandler("h", sub, "in", nop, amo); err != nil {
		t.Fatal(err)
	}
	if err := r.Use(retry); err == nil || !strings.Contains(err.Error(), "at-most-once") {
		t.Fatalf("Use(Retry) after an at-most-once AddHandler: %v; want a refusal", err)
	}
	// At-least-once keeps taking Retry.
	if err := r.AddHandler("h2", sub, "in", nop, router.WithMiddleware(retry)); err != nil {
		t.Fatal(err)
	}
}

// A retry the router cannot recognise (hidden in Chain) still does not run
// an at-most-once handler twice.
func TestAtMostOnceStopsUnmarkedRetry(t *testing.T) {
	pub, sub := memPair(t, "amo-hidden", "g", 16)
	retry, err := middleware.Retry(middleware.RetryConfig{MaxAttempts: 5, InitialInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	chainErr := make(chan error, 1)
	catch := func(next router.Handler) router.Handler {
		return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			outs, err := next(ctx, m)
			chainErr <- err
			return outs, err
		}
	}
	d := newDeliveries()
	r := newRouter(t, router.Config{RedeliveryDelay: router.NoRedeliveryDelay})
	if err := r.AddHandler("h", sub, "in", failing(d), router.WithGuarantee(relay.AtMostOnce),
		router.WithMiddleware(catch, router.Chain(retry))); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "in", "fail")
	runRouter(t, r)
	var gotErr error
	select {
	case gotErr = <-chainErr:
	case <-time.After(10 * time.Second):
		t.Fatal("the chain did not return")
	}
	waitLag(t, sub, "in", 0)
	if n := d.count("fail"); n != 1 {
		t.Fatalf("handled %d times; want once", n)
	}
	if !errors.Is(gotErr, router.ErrRetriedAtMostOnce) {
		t.Fatalf("chain returned %v; want ErrRetriedAtMostOnce", gotErr)
	}
}

func TestExactlyOnceRefused(t *testing.T) {
	_, sub := memPair(t, "eo", "g", 16)
	nop := func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil }
	r := newRouter(t, router.Config{})
	err := r.AddHandler("h", sub, "in", nop, router.WithGuarantee(relay.ExactlyOnce))
	var ge *router.GuaranteeError
	if !errors.As(err, &ge) {
		t.Fatalf("AddHandler(exactly-once): %v; want a *GuaranteeError", err)
	}
	if ge.Handler != "h" || ge.Want != relay.ExactlyOnce ||
		!slices.Equal(ge.Available, []relay.Guarantee{relay.AtMostOnce, relay.AtLeastOnce}) {
		t.Fatalf("%+v", ge)
	}
	for _, s := range []string{"exactly-once", "at-most-once", "at-least-once", "no transactions", "kafka.NewExactlyOnce", "Dedup"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	bnop := func(context.Context, []*relay.Message) error { return nil }
	if err := r.AddBatchHandler("b", sub, "in", bnop, router.WithBatchGuarantee(relay.ExactlyOnce)); !errors.As(err, &ge) {
		t.Fatalf("AddBatchHandler(exactly-once): %v; want a *GuaranteeError", err)
	}
}

// pairedSub is a subscriber that declares itself paired with one publisher.
type pairedSub struct {
	relay.Subscriber
	pub relay.Publisher
}

func (s pairedSub) ExactlyOnceWith(p relay.Publisher) bool { return p == s.pub }

func TestExactlyOnceNeedsPairedOutputs(t *testing.T) {
	pub, sub := memPair(t, "eo-paired", "g", 16)
	other, _ := memPair(t, "eo-other", "g", 16)
	ps := pairedSub{Subscriber: sub, pub: pub}
	nop := func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil }
	r := newRouter(t, router.Config{})
	if err := r.AddHandler("ok", ps, "in", nop, router.WithGuarantee(relay.ExactlyOnce), router.WithOutput(pub, "out")); err != nil {
		t.Fatalf("paired outputs refused: %v", err)
	}
	cases := []struct {
		name string
		sub  relay.Subscriber
		opts []router.HandlerOption
		want string
	}{
		{"unpaired", ps, []router.HandlerOption{router.WithOutput(pub, "a"), router.WithOutput(other, "b")}, `output 1 (topic "b") publishes with a publisher that is not paired`},
		{"nooutputs", ps, nil, "the handler has no outputs"},
		{"plain", sub, []router.HandlerOption{router.WithOutput(pub, "a")}, "has no transactions spanning its acks"},
	}
	for _, c := range cases {
		err := r.AddHandler(c.name, c.sub, "in", nop, append(c.opts, router.WithGuarantee(relay.ExactlyOnce))...)
		var ge *router.GuaranteeError
		if !errors.As(err, &ge) || ge.Want != relay.ExactlyOnce || ge.Handler != c.name {
			t.Fatalf("%s: %v; want a *GuaranteeError", c.name, err)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %q does not say %q", c.name, err, c.want)
		}
	}
	bnop := func(context.Context, []*relay.Message) error { return nil }
	var ge *router.GuaranteeError
	if err := r.AddBatchHandler("b", ps, "in", bnop, router.WithBatchGuarantee(relay.ExactlyOnce)); !errors.As(err, &ge) ||
		!strings.Contains(err.Error(), "batch handlers") {
		t.Fatalf("AddBatchHandler(exactly-once, paired): %v; want a *GuaranteeError about batch handlers", err)
	}
}
