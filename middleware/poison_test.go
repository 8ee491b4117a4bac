package middleware_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// The Retry/PoisonQueue order, both ways: the recommended order
// Use(poison, retry) retries first and poisons what Retry gave up on;
// the reverse poisons on the first failure, because PoisonQueue hides the
// error from Retry.
func TestRetryPoisonOrder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		order     func(poison, retry router.Middleware) []router.Middleware
		wantCalls int
	}{
		{"Use(poison, retry) [recommended]", func(p, r router.Middleware) []router.Middleware { return []router.Middleware{p, r} }, 3},
		{"Use(retry, poison)", func(p, r router.Middleware) []router.Middleware { return []router.Middleware{r, p} }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sub := e.sub("g", "in")
			e.sub("dlq-reader", "poison")
			clk := newFakeClock()
			retry := must(middleware.Retry(middleware.RetryConfig{MaxAttempts: 3, Now: clk.Now, After: clk.After}))
			poison := must(middleware.PoisonQueue(middleware.PoisonConfig{Publisher: e.pub, Topic: "poison", Now: clk.Now}))
			r := newRouter(t, tc.order(poison, retry)...)
			var calls atomic.Int32
			_ = r.AddHandler("h", sub, "in", func(context.Context, *relay.Message) ([]*relay.Message, error) {
				calls.Add(1)
				return nil, errFlaky
			})
			r.Own(sub) // Run then returns only after the subscription has settled and released everything
			stop := run(t, r)
			m := relay.NewMessage([]byte("order"))
			e.publish("in", m)
			var got []*relay.Message
			waitFor(t, "the poisoned copy", func() bool {
				got = append(got, e.drain("dlq-reader", "poison")...)
				return len(got) > 0
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if n := int(calls.Load()); n != tc.wantCalls {
				t.Fatalf("handler ran %d times, want %d", n, tc.wantCalls)
			}
			if len(got) != 1 || got[0].ID != m.ID {
				t.Fatalf("poison topic got %d messages", len(got))
			}
			if a := got[0].Metadata.Get(middleware.PoisonAttemptsKey); a != map[int]string{3: "3", 1: "1"}[tc.wantCalls] {
				t.Fatalf("attempts metadata %q", a)
			}
			if left := e.drain("g", "in"); len(left) != 0 {
				t.Fatalf("original not acked: %d left", len(left))
			}
		})
	}
}

func TestPoisonMetadataAndAckAfterPublish(t *testing.T) {
	e := newEnv(t)
	sub := e.sub("g", "orders")
	e.sub("dlq-reader", "orders.poison")
	clk := newFakeClock()
	start := clk.Now()
	// The poison publisher checks that the original is still unsettled
	// when the copy is published.
	var unsettledAtPublish atomic.Bool
	var current atomic.Pointer[relay.Message]
	pub := &hookPub{Publisher: e.pub, before: func() { unsettledAtPublish.Store(!current.Load().Settled()) }}
	retry := must(middleware.Retry(middleware.RetryConfig{MaxAttempts: 3, InitialInterval: time.Second, NoJitter: true, Now: clk.Now, After: clk.After}))
	poison := must(middleware.PoisonQueue(middleware.PoisonConfig{Publisher: pub, Topic: "orders.poison", Now: clk.Now}))
	obs := &recordingObserver{}
	observe := func(next router.Handler) router.Handler {
		return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			return next(middleware.WithObserver(ctx, obs), m)
		}
	}
	r := newRouter(t, observe, poison, retry)
	_ = r.AddHandler("billing", sub, "orders", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		current.Store(m)
		return nil, errors.New("card declined: insufficient funds")
	})
	r.Own(sub) // Run then returns only after the subscription has settled and released everything
	stop := run(t, r)
	m := relay.NewMessage([]byte(`{"order":1}`))
	m.Key = "customer-7"
	m.Metadata = relay.Metadata{"trace": "abc"}
	e.publish("orders", m)
	var got []*relay.Message
	waitFor(t, "the poisoned copy", func() bool {
		got = append(got, e.drain("dlq-reader", "orders.poison")...)
		return len(got) > 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	p := got[0]
	if p.ID != m.ID || p.Key != m.Key || string(p.Payload) != string(m.Payload) || p.Metadata.Get("trace") != "abc" {
		t.Fatalf("copy differs: %+v", p)
	}
	want := map[string]string{
		middleware.PoisonTopicKey:        "orders",
		middleware.PoisonHandlerKey:      "billing",
		middleware.PoisonAttemptsKey:     "3",
		middleware.PoisonDeliveriesKey:   "1",
		middleware.PoisonFirstFailureKey: start.Format(time.RFC3339Nano),
		middleware.PoisonLastFailureKey:  start.Add(3 * time.Second).Format(time.RFC3339Nano), // waits 1s + 2s
		middleware.PoisonPermanentKey:    "false",
	}
	for k, v := range want {
		if got := p.Metadata.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if reason := p.Metadata.Get(middleware.PoisonReasonKey); reason != "card declined: insufficient funds" {
		t.Errorf("reason %q", reason)
	}
	if _, ok := p.Metadata[middleware.PoisonStackKey]; ok {
		t.Error("stack key on a non-panic failure")
	}
	if !unsettledAtPublish.Load() {
		t.Fatal("original was settled before the poison publish")
	}
	if left := e.drain("g", "orders"); len(left) != 0 {
		t.Fatalf("original not acked after poisoning: %d left", len(left))
	}
	if len(obs.poisoned) != 1 || len(obs.retries) != 2 {
		t.Fatalf("observer: %d poisoned, %d retries", len(obs.poisoned), len(obs.retries))
	}
}

func TestPoisonPublishFailureNacksNothingLost(t *testing.T) {
	e := newEnv(t)
	sub := e.sub("g", "in")
	e.sub("dlq-reader", "poison")
	var fails atomic.Int32
	fails.Store(2) // the first two poison publishes fail
	pub := &hookPub{Publisher: e.pub, fail: func() error {
		if fails.Add(-1) >= 0 {
			return errors.New("poison broker down")
		}
		return nil
	}}
	poison := must(middleware.PoisonQueue(middleware.PoisonConfig{Publisher: pub, Topic: "poison"}))
	r := newRouter(t, poison)
	var attempts sync.Map
	var calls atomic.Int32
	_ = r.AddHandler("h", sub, "in", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		calls.Add(1)
		attempts.Store(m.Attempt(), true)
		return nil, errFlaky
	})
	r.Own(sub) // Run then returns only after the subscription has settled and released everything
	stop := run(t, r)
	m := relay.NewMessage([]byte("x"))
	e.publish("in", m)
	var got []*relay.Message
	waitFor(t, "the poisoned copy", func() bool {
		got = append(got, e.drain("dlq-reader", "poison")...)
		return len(got) > 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Two failed poison publishes → two nacks → third delivery poisoned.
	if calls.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", calls.Load())
	}
	if _, ok := attempts.Load(3); !ok {
		t.Fatal("third delivery missing")
	}
	if len(got) != 1 || got[0].Metadata.Get(middleware.PoisonDeliveriesKey) != "3" {
		t.Fatalf("poison topic: %d messages", len(got))
	}
	if left := e.drain("g", "in"); len(left) != 0 {
		t.Fatalf("%d left in the input group", len(left))
	}
}

func TestPoisonAfterDeliveriesAndPermanent(t *testing.T) {
	e := newEnv(t)
	sub := e.sub("g", "in")
	e.sub("dlq-reader", "poison")
	poison := must(middleware.PoisonQueue(middleware.PoisonConfig{Publisher: e.pub, Topic: "poison", AfterDeliveries: 3}))
	r := newRouter(t, poison)
	var calls counter
	_ = r.AddHandler("h", sub, "in", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		calls.inc(m.ID)
		if string(m.Payload) == "permanent" {
			return nil, relay.Permanent(errors.New("malformed"))
		}
		return nil, errFlaky
	})
	r.Own(sub) // Run then returns only after the subscription has settled and released everything
	stop := run(t, r)
	flaky, perm := relay.NewMessage([]byte("flaky")), relay.NewMessage([]byte("permanent"))
	e.publish("in", flaky, perm)
	got := map[string]*relay.Message{}
	waitFor(t, "two poisoned copies", func() bool {
		for _, m := range e.drain("dlq-reader", "poison") {
			got[m.ID] = m
		}
		return len(got) == 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if calls.get(flaky.ID) != 3 || calls.get(perm.ID) != 1 {
		t.Fatalf("calls: flaky %d (want 3), permanent %d (want 1)", calls.get(flaky.ID), calls.get(perm.ID))
	}
	if d := got[flaky.ID].Metadata.Get(middleware.PoisonDeliveriesKey); d != "3" {
		t.Fatalf("flaky deliveries %q", d)
	}
	if p := got[perm.ID].Metadata.Get(middleware.PoisonPermanentKey); p != "true" {
		t.Fatalf("permanent flag %q", p)
	}
}

func TestPoisonNotOnShutdownOrFilteredErrors(t *testing.T) {
	pub := &countingPub{}
	errSkip := errors.New("skip me")
	poison := must(middleware.PoisonQueue(middleware.PoisonConfig{Publisher: pub, Topic: "p", ShouldPoison: func(err error) bool { return !errors.Is(err, errSkip) }}))
	fail := func(err error) router.Handler {
		return func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, err }
	}
	ctx, cancel := context.WithCancel(handlerCtx())
	cancel()
	if _, err := poison(fail(errFlaky))(ctx, relay.NewMessage(nil)); err == nil {
		t.Fatal("poisoned while shutting down")
	}
	interrupted := &middleware.RetryError{Attempts: 1, Reason: middleware.RetryInterrupted, Err: errFlaky}
	if _, err := poison(fail(interrupted))(handlerCtx(), relay.NewMessage(nil)); err == nil {
		t.Fatal("poisoned an interrupted retry")
	}
	if _, err := poison(fail(errSkip))(handlerCtx(), relay.NewMessage(nil)); !errors.Is(err, errSkip) {
		t.Fatal("poisoned a filtered error")
	}
	if pub.n.Load() != 0 {
		t.Fatalf("%d poison publishes", pub.n.Load())
	}
	if _, err := poison(fail(errFlaky))(handlerCtx(), relay.NewMessage(nil)); err != nil || pub.n.Load() != 1 {
		t.Fatalf("not poisoned: %v", err)
	}
}

func TestPoisonPanicStackAndTruncation(t *testing.T) {
	pub := &countingPub{}
	poison := must(middleware.PoisonQueue(middleware.PoisonConfig{Publisher: pub, Topic: "p", MaxReasonBytes: 200}))
	h := router.Chain(poison, middleware.Recoverer)(func(context.Context, *relay.Message) ([]*relay.Message, error) {
		panic(strings.Repeat("é", 300))
	})
	if _, err := h(handlerCtx(), relay.NewMessage(nil)); err != nil {
		t.Fatal(err)
	}
	p := pub.last
	reason, stack := p.Metadata.Get(middleware.PoisonReasonKey), p.Metadata.Get(middleware.PoisonStackKey)
	if len(reason) > 200 || !strings.HasPrefix(reason, "panic: éé") || !strings.HasSuffix(reason, "[truncated]") {
		t.Fatalf("reason %q (%d bytes)", reason, len(reason))
	}
	if stack == "" || len(stack) > 200 {
		t.Fatalf("stack %d bytes", len(stack))
	}
	if p.Metadata.Get(middleware.PoisonTopicKey) != "in" || p.Metadata.Get(middleware.PoisonHandlerKey) != "h" {
		t.Fatalf("topic/handler from the router context: %v", p.Metadata)
	}
}

func TestPoisonConfigValidation(t *testing.T) {
	_, err := middleware.PoisonQueue(middleware.PoisonConfig{AfterDeliveries: -1})
	if err == nil || !strings.Contains(err.Error(), "Publisher") || !strings.Contains(err.Error(), "Topic") || !strings.Contains(err.Error(), "AfterDeliveries") {
		t.Fatalf("validation: %v", err)
	}
}

// hookPub wraps a publisher with a hook before publishing and an optional
// injected failure.
type hookPub struct {
	relay.Publisher
	before func()
	fail   func() error
}

func (p *hookPub) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	if p.before != nil {
		p.before()
	}
	if p.fail != nil {
		if err := p.fail(); err != nil {
			return err
		}
	}
	return p.Publisher.Publish(ctx, topic, msgs...)
}

// countingPub records publishes in memory.
type countingPub struct {
	n    atomic.Int32
	last *relay.Message
}

func (p *countingPub) Publish(_ context.Context, _ string, msgs ...*relay.Message) error {
	p.n.Add(int32(len(msgs)))
	p.last = msgs[len(msgs)-1]
	return nil
}
func (p *countingPub) Close() error { return nil }
