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
			if len(got) != 1 {
				t.Fatalf("poison topic got %d messages", len(got))
			}
			if got[0].ID != middleware.PoisonID(m.ID, "h", "in") || got[0].Metadata.Get(middleware.PoisonOriginalIDKey) != m.ID {
				t.Fatalf("copy ID %s, original %q; want %s, %s", got[0].ID, got[0].Metadata.Get(middleware.PoisonOriginalIDKey), middleware.PoisonID(m.ID, "h", "in"), m.ID)
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
	if p.ID == m.ID || p.ID != middleware.PoisonID(m.ID, "billing", "orders") || p.Key != m.Key || string(p.Payload) != string(m.Payload) || p.Metadata.Get("trace") != "abc" {
		t.Fatalf("copy differs: %+v", p)
	}
	want := map[string]string{
		middleware.PoisonOriginalIDKey:   m.ID,
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
	var sentMu sync.Mutex
	var sent []string // the copy ID of each poison publish, failed ones included
	pub := &hookPub{Publisher: e.pub, seen: func(msgs []*relay.Message) {
		sentMu.Lock()
		defer sentMu.Unlock()
		for _, m := range msgs {
			sent = append(sent, m.ID)
		}
	}, fail: func() error {
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
	// Each delivery poisoned the same message in the same handler: every
	// attempt carried the same copy ID, so a broker or Dedup that saw an
	// earlier one (its ack lost) keeps one copy.
	sentMu.Lock()
	defer sentMu.Unlock()
	if want := middleware.PoisonID(m.ID, "h", "in"); len(sent) != 3 || sent[0] != want || sent[1] != want || sent[2] != want || got[0].ID != want {
		t.Fatalf("poison publishes sent IDs %v, delivered %s; want 3 times %s", sent, got[0].ID, want)
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
			got[m.Metadata.Get(middleware.PoisonOriginalIDKey)] = m
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
	seen   func([]*relay.Message)
	fail   func() error
}

func (p *hookPub) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	if p.before != nil {
		p.before()
	}
	if p.seen != nil {
		p.seen(msgs)
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

// dedupPub stores a message ID once per topic, as NATS JetStream does
// within its duplicate window: a second message with a seen ID is
// dropped and its Publish still succeeds.
type dedupPub struct {
	relay.Publisher
	mu   sync.Mutex
	seen map[string]bool
}

func (p *dedupPub) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	p.mu.Lock()
	var keep []*relay.Message
	for _, m := range msgs {
		if k := topic + "\x00" + m.ID; !p.seen[k] {
			p.seen[k] = true
			keep = append(keep, m)
		}
	}
	p.mu.Unlock()
	if len(keep) == 0 {
		return nil
	}
	return p.Publisher.Publish(ctx, topic, keep...)
}

// Two handlers (in two groups) poison the same message into one shared
// poison topic on a broker that stores an ID once: both copies arrive,
// with distinct IDs and the original ID in their metadata. The same
// handler poisoning the same message twice publishes one ID, stored once.
func TestPoisonCopiesFromTwoHandlersAreDistinct(t *testing.T) {
	e := newEnv(t)
	billing, shipping := e.sub("billing", "orders"), e.sub("shipping", "orders")
	e.sub("ops", "orders.poison")
	pub := &dedupPub{Publisher: e.pub, seen: map[string]bool{}}
	poison := must(middleware.PoisonQueue(middleware.PoisonConfig{Publisher: pub, Topic: "orders.poison"}))
	r := newRouter(t, poison)
	fail := func(context.Context, *relay.Message) ([]*relay.Message, error) {
		return nil, relay.Permanent(errors.New("malformed"))
	}
	_ = r.AddHandler("billing", billing, "orders", fail)
	_ = r.AddHandler("shipping", shipping, "orders", fail)
	r.Own(billing, shipping)
	stop := run(t, r)
	m := relay.NewMessage([]byte("bad order"))
	e.publish("orders", m)
	var got []*relay.Message
	waitFor(t, "two poisoned copies", func() bool {
		got = append(got, e.drain("ops", "orders.poison")...)
		return len(got) >= 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	byHandler := map[string]*relay.Message{}
	for _, p := range got {
		byHandler[p.Metadata.Get(middleware.PoisonHandlerKey)] = p
	}
	b, s := byHandler["billing"], byHandler["shipping"]
	if len(got) != 2 || b == nil || s == nil {
		t.Fatalf("poison topic got %d copies from %v, want one from billing and one from shipping", len(got), byHandler)
	}
	if b.ID == s.ID || b.ID == m.ID || s.ID == m.ID {
		t.Fatalf("copy IDs billing %s, shipping %s, original %s: want three distinct IDs", b.ID, s.ID, m.ID)
	}
	if b.ID != middleware.PoisonID(m.ID, "billing", "orders") || s.ID != middleware.PoisonID(m.ID, "shipping", "orders") {
		t.Fatalf("copy IDs %s, %s are not PoisonID of the original, handler and topic", b.ID, s.ID)
	}
	for _, p := range got {
		if o := p.Metadata.Get(middleware.PoisonOriginalIDKey); o != m.ID || string(p.Payload) != "bad order" {
			t.Fatalf("copy %s: original ID %q, payload %q", p.ID, o, p.Payload)
		}
	}

	// The same handler poisons the same message again (say its ack was
	// lost): the copy has the same ID, and the deduplicating broker keeps
	// the one it has.
	h := poison(fail)
	ctx := router.WithHandlerInfo(context.Background(), "billing", "orders")
	if _, err := h(ctx, m); err != nil {
		t.Fatal(err)
	}
	if again := e.drain("ops", "orders.poison"); len(again) != 0 {
		t.Fatalf("a repeated poison of the same message by the same handler stored %d more copies (ID %s)", len(again), again[0].ID)
	}
}

func TestPoisonIDIsANameBasedUUID(t *testing.T) {
	id := middleware.PoisonID("0192d7a0-0000-7000-8000-000000000001", "billing", "orders")
	if id != middleware.PoisonID("0192d7a0-0000-7000-8000-000000000001", "billing", "orders") {
		t.Fatal("PoisonID is not deterministic")
	}
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' || id[14] != '5' || !strings.ContainsRune("89ab", rune(id[19])) {
		t.Fatalf("PoisonID = %q, want a version-5 UUID in its text form", id)
	}
	if strings.Trim(strings.ReplaceAll(id, "-", ""), "0123456789abcdef") != "" {
		t.Fatalf("PoisonID = %q: not lower-case hex", id)
	}
	// Every part counts, and parts cannot be shifted into one another.
	seen := map[string][3]string{}
	for _, in := range [][3]string{
		{"m1", "billing", "orders"}, {"m2", "billing", "orders"}, {"m1", "shipping", "orders"},
		{"m1", "billing", "orders.eu"}, {"m1b", "illing", "orders"}, {"m1", "billingorders", ""},
		{"", "", ""}, {"m1", "", "billingorders"},
	} {
		id := middleware.PoisonID(in[0], in[1], in[2])
		if prev, dup := seen[id]; dup {
			t.Fatalf("PoisonID%q = PoisonID%q = %s", in, prev, id)
		}
		seen[id] = in
	}
}
