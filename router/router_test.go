package router_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

func newRouter(t *testing.T, cfg router.Config) *router.Router {
	t.Helper()
	r, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOutputsPublishedBeforeAck(t *testing.T) {
	sub, pub := newFakeSub(), newFakePub()
	r := newRouter(t, router.Config{})
	var seenSettled []bool
	var mu sync.Mutex
	h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		return []*relay.Message{relay.NewMessage([]byte("out-" + m.ID))}, nil
	}
	checking := &checkingPub{fakePub: pub, before: func() {
		mu.Lock()
		defer mu.Unlock()
		seenSettled = append(seenSettled, len(sub.events()) > 0)
	}}
	if err := r.AddHandler("h", sub, "in", h, router.WithOutput(checking, "out")); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	sub.push(t, sub.msg("m1", "", 1))
	if s := sub.waitSettled(t, "m1"); !s.Ack {
		t.Fatalf("settled %+v, want ack", s)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := pub.published("out")
	if len(out) != 1 || string(out[0].Payload) != "out-m1" {
		t.Fatalf("published %v", out)
	}
	if !slices.Equal(seenSettled, []bool{false}) {
		t.Fatalf("input settled before publish: %v", seenSettled)
	}
}

type checkingPub struct {
	*fakePub
	before func()
}

func (p *checkingPub) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	p.before()
	return p.fakePub.Publish(ctx, topic, msgs...)
}

func TestErrorNacksWithRedeliveryDelay(t *testing.T) {
	sub := newFakeSub()
	r := newRouter(t, router.Config{RedeliveryDelay: router.ExponentialRedelivery(time.Second, 5*time.Second)})
	fail := errors.New("boom")
	if err := r.AddHandler("h", sub, "in", func(context.Context, *relay.Message) ([]*relay.Message, error) {
		return nil, fail
	}); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 60: 5 * time.Second} {
		id := fmt.Sprintf("m%d", attempt)
		sub.push(t, sub.msg(id, "", attempt))
		s := sub.waitSettled(t, id)
		if s.Ack || s.Delay != want {
			t.Errorf("attempt %d: settled %+v, want nack after %v", attempt, s, want)
		}
	}
}

func TestPublishFailureNacks(t *testing.T) {
	sub, pub := newFakeSub(), newFakePub()
	pub.fail = errors.New("broker down")
	r := newRouter(t, router.Config{RedeliveryDelay: router.NoRedeliveryDelay})
	if err := r.AddHandler("h", sub, "in", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		return []*relay.Message{m.Copy()}, nil
	}, router.WithOutput(pub, "out")); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	sub.push(t, sub.msg("m1", "", 1))
	if s := sub.waitSettled(t, "m1"); s.Ack || s.Delay != 0 {
		t.Fatalf("settled %+v, want immediate nack", s)
	}
}

func TestNoOutputNacks(t *testing.T) {
	sub := newFakeSub()
	r := newRouter(t, router.Config{})
	if err := r.AddHandler("h", sub, "in", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		return []*relay.Message{m.Copy()}, nil
	}); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	sub.push(t, sub.msg("m1", "", 1))
	if s := sub.waitSettled(t, "m1"); s.Ack {
		t.Fatal("a message whose outputs went nowhere was acked")
	}
}

func TestOutputMatchRoutes(t *testing.T) {
	sub, pub := newFakeSub(), newFakePub()
	r := newRouter(t, router.Config{})
	isA := func(m *relay.Message) bool { return m.Key == "a" }
	isB := func(m *relay.Message) bool { return m.Key == "b" }
	if err := r.AddHandler("h", sub, "in", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		if m.ID == "bad" {
			return []*relay.Message{{ID: "x", Key: "c"}}, nil
		}
		return []*relay.Message{{ID: "1", Key: "a"}, {ID: "2", Key: "b"}, {ID: "3", Key: "a"}}, nil
	}, router.WithOutputs(router.Output{Publisher: pub, Topic: "ta", Match: isA}, router.Output{Publisher: pub, Topic: "tb", Match: isB})); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	sub.push(t, sub.msg("good", "", 1))
	if s := sub.waitSettled(t, "good"); !s.Ack {
		t.Fatal("not acked")
	}
	sub.push(t, sub.msg("bad", "", 1))
	if s := sub.waitSettled(t, "bad"); s.Ack {
		t.Fatal("message with an unroutable output was acked")
	}
	ids := func(ms []*relay.Message) (out []string) {
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	if got := ids(pub.published("ta")); !slices.Equal(got, []string{"1", "3"}) {
		t.Errorf("ta got %v", got)
	}
	if got := ids(pub.published("tb")); !slices.Equal(got, []string{"2"}) {
		t.Errorf("tb got %v", got)
	}
}

func TestPanicRecoveredByRouter(t *testing.T) {
	sub := newFakeSub()
	var seen error
	var mu sync.Mutex
	r := newRouter(t, router.Config{RedeliveryDelay: func(_ *relay.Message, err error) time.Duration {
		mu.Lock()
		seen = err
		mu.Unlock()
		return 0
	}})
	if err := r.AddHandler("h", sub, "in", func(context.Context, *relay.Message) ([]*relay.Message, error) {
		panic("kaboom")
	}); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	sub.push(t, sub.msg("m1", "", 1))
	if s := sub.waitSettled(t, "m1"); s.Ack {
		t.Fatal("panicking handler's message acked")
	}
	// The router keeps running after a panic.
	sub.push(t, sub.msg("m2", "", 1))
	sub.waitSettled(t, "m2")
	mu.Lock()
	defer mu.Unlock()
	var pe *router.PanicError
	if !errors.As(seen, &pe) || pe.Value != "kaboom" || !strings.Contains(string(pe.Stack), "router_test") {
		t.Fatalf("error %#v is not a PanicError with value and stack", seen)
	}
}

func TestMiddlewareOrder(t *testing.T) {
	sub := newFakeSub()
	r := newRouter(t, router.Config{})
	var mu sync.Mutex
	var trace []string
	rec := func(s string) {
		mu.Lock()
		trace = append(trace, s)
		mu.Unlock()
	}
	mw := func(name string) router.Middleware {
		return func(next router.Handler) router.Handler {
			return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
				rec(name + ">")
				out, err := next(ctx, m)
				rec("<" + name)
				return out, err
			}
		}
	}
	h := func(context.Context, *relay.Message) ([]*relay.Message, error) { rec("h"); return nil, nil }
	// Handler-level middleware is given before Use: it still runs inside.
	if err := r.AddHandler("h", sub, "in", h, router.WithMiddleware(mw("c"), mw("d"))); err != nil {
		t.Fatal(err)
	}
	if err := r.Use(mw("a"), mw("b")); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	sub.push(t, sub.msg("m1", "", 1))
	sub.waitSettled(t, "m1")
	mu.Lock()
	defer mu.Unlock()
	want := []string{"a>", "b>", "c>", "d>", "h", "<d", "<c", "<b", "<a"}
	if !slices.Equal(trace, want) {
		t.Fatalf("order %v, want %v", trace, want)
	}
	if err := r.Use(mw("late")); !errors.Is(err, router.ErrRunning) {
		t.Fatalf("Use after Run: %v", err)
	}
}

func TestChainOrder(t *testing.T) {
	var trace []string
	mw := func(name string) router.Middleware {
		return func(next router.Handler) router.Handler {
			return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
				trace = append(trace, name)
				return next(ctx, m)
			}
		}
	}
	h := router.Chain(mw("a"), nil, mw("b"))(func(context.Context, *relay.Message) ([]*relay.Message, error) {
		trace = append(trace, "h")
		return nil, nil
	})
	_, _ = h(context.Background(), relay.NewMessage(nil))
	if !slices.Equal(trace, []string{"a", "b", "h"}) {
		t.Fatal(trace)
	}
}

func TestHandlerContext(t *testing.T) {
	sub := newFakeSub()
	r := newRouter(t, router.Config{})
	type seen struct {
		name, topic string
		stopping    <-chan struct{}
		err         error
	}
	got := make(chan seen, 1)
	if err := r.AddHandler("billing", sub, "orders", func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		got <- seen{router.HandlerName(ctx), router.Topic(ctx), router.Stopping(ctx), ctx.Err()}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	sub.push(t, sub.msg("m1", "", 1))
	s := <-got
	if s.name != "billing" || s.topic != "orders" || s.err != nil || s.stopping == nil {
		t.Fatalf("handler ctx: %+v", s)
	}
	select {
	case <-s.stopping:
		t.Fatal("stopping closed while running")
	default:
	}
	_ = stop()
	select {
	case <-s.stopping:
	default:
		t.Fatal("stopping not closed after shutdown")
	}
	if router.HandlerName(context.Background()) != "" || router.Stopping(context.Background()) != nil {
		t.Fatal("values outside a router")
	}
}

func TestAddHandlerValidation(t *testing.T) {
	r := newRouter(t, router.Config{})
	h := func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil }
	err := r.AddHandler("", nil, "", nil, router.WithConcurrency(0), router.WithOutput(nil, ""))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"name is empty", "subscriber is nil", "invalid topic", "handler func is nil", "concurrency 0", "publisher is nil"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	sub := newFakeSub()
	if err := r.AddHandler("x", sub, "t", h); err != nil {
		t.Fatal(err)
	}
	if err := r.AddHandler("x", sub, "t2", h); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate name: %v", err)
	}
	if _, err := router.New(router.Config{CloseTimeout: -1}); err == nil {
		t.Fatal("negative CloseTimeout accepted")
	}
}

func TestLifecycle(t *testing.T) {
	t.Run("run twice", func(t *testing.T) {
		r := newRouter(t, router.Config{})
		_ = r.AddHandler("h", newFakeSub(), "in", func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil })
		stop := runRouter(t, r)
		if err := r.Run(context.Background()); !errors.Is(err, router.ErrRunning) {
			t.Fatalf("second Run: %v", err)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if err := r.Run(context.Background()); !errors.Is(err, relay.ErrClosed) {
			t.Fatalf("Run after stop: %v", err)
		}
		if err := r.AddHandler("h2", newFakeSub(), "in", func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil }); !errors.Is(err, router.ErrRunning) {
			t.Fatalf("AddHandler after Run: %v", err)
		}
	})
	t.Run("close before run", func(t *testing.T) {
		r := newRouter(t, router.Config{})
		pub := newFakePub()
		r.Own(pub)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Run(context.Background()); !errors.Is(err, router.ErrClosed) {
			t.Fatalf("Run after Close: %v", err)
		}
		if pub.closeCount() != 1 {
			t.Fatalf("owned publisher closed %d times", pub.closeCount())
		}
		late := newFakePub()
		r.Own(late)
		if late.closeCount() != 1 {
			t.Fatal("Own after stop did not close")
		}
	})
	t.Run("concurrent close", func(t *testing.T) {
		r := newRouter(t, router.Config{})
		_ = r.AddHandler("h", newFakeSub(), "in", func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil })
		runRouter(t, r)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.Close(); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		<-r.Done()
	})
	t.Run("ctx cancel drains", func(t *testing.T) {
		r := newRouter(t, router.Config{})
		sub := newFakeSub()
		_ = r.AddHandler("h", sub, "in", func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil })
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- r.Run(ctx) }()
		<-r.Running()
		sub.push(t, sub.msg("m1", "", 1))
		sub.waitSettled(t, "m1")
		cancel()
		if err := <-errc; err != nil {
			t.Fatalf("Run after ctx cancel: %v", err)
		}
		<-sub.subEnded
	})
	t.Run("subscribe error", func(t *testing.T) {
		r := newRouter(t, router.Config{})
		ok, bad := newFakeSub(), newFakeSub()
		bad.subErr = errors.New("no such topic")
		pub := newFakePub()
		r.Own(pub)
		h := func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil }
		_ = r.AddHandler("ok", ok, "a", h)
		_ = r.AddHandler("bad", bad, "b", h)
		err := r.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "no such topic") || !strings.Contains(err.Error(), `"bad"`) {
			t.Fatalf("Run: %v", err)
		}
		<-ok.subEnded // the started subscription was ended
		if pub.closeCount() != 1 {
			t.Fatal("owned publisher not closed after a failed start")
		}
	})
	t.Run("subscription ends", func(t *testing.T) {
		r := newRouter(t, router.Config{})
		sub := newFakeSub()
		_ = r.AddHandler("h", sub, "in", func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil })
		errc := make(chan error, 1)
		go func() { errc <- r.Run(context.Background()) }()
		<-r.Running()
		close(sub.in) // the subscriber ends the subscription on its own
		if err := <-errc; !errors.Is(err, router.ErrSubscriptionEnded) {
			t.Fatalf("Run: %v", err)
		}
	})
}

func TestSharedPublisherClosedOnceByOwner(t *testing.T) {
	shared := newFakePub()
	h := func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		return []*relay.Message{m.Copy()}, nil
	}

	// A router that does not own the publisher never closes it, even with
	// several handlers using it.
	r1 := newRouter(t, router.Config{})
	s1, s2 := newFakeSub(), newFakeSub()
	_ = r1.AddHandler("h1", s1, "a", h, router.WithOutput(shared, "x"))
	_ = r1.AddHandler("h2", s2, "b", h, router.WithOutput(shared, "y"))
	stop1 := runRouter(t, r1)

	// A second router owns it (given twice): it closes it once, when it stops.
	r2 := newRouter(t, router.Config{})
	s3, s4 := newFakeSub(), newFakeSub()
	_ = r2.AddHandler("h3", s3, "c", h, router.WithOutput(shared, "z"))
	_ = r2.AddHandler("h4", s4, "d", h, router.WithOutput(shared, "z"))
	r2.Own(shared, s3)
	r2.Own(shared)
	stop2 := runRouter(t, r2)

	s1.push(t, s1.msg("m1", "", 1))
	s1.waitSettled(t, "m1")
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	if n := shared.closeCount(); n != 0 {
		t.Fatalf("non-owning router closed the shared publisher %d times", n)
	}
	s3.push(t, s3.msg("m3", "", 1))
	if s := s3.waitSettled(t, "m3"); !s.Ack {
		t.Fatal("second router could not publish after the first stopped")
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if n := shared.closeCount(); n != 1 {
		t.Fatalf("owner closed the shared publisher %d times, want 1", n)
	}
	if s3.closes != 1 || s4.closes != 0 {
		t.Fatalf("subscriber closes: owned %d, not owned %d", s3.closes, s4.closes)
	}
}

func TestUnkeyedMessagesUseAllLanes(t *testing.T) {
	const n = 6
	sub := newFakeSub()
	r := newRouter(t, router.Config{})
	var wg sync.WaitGroup
	wg.Add(n)
	if err := r.AddHandler("h", sub, "in", func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		// Every handler waits for all n to have started: this completes only
		// if n messages run at once.
		wg.Done()
		wg.Wait()
		return nil, nil
	}, router.WithConcurrency(n)); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	for i := range n {
		sub.push(t, sub.msg(string(rune('a'+i)), "", 1))
	}
	for i := range n {
		if s := sub.waitSettled(t, string(rune('a'+i))); !s.Ack {
			t.Fatal("not acked")
		}
	}
}

func TestHandlerMayAckItself(t *testing.T) {
	sub, pub := newFakeSub(), newFakePub()
	r := newRouter(t, router.Config{})
	if err := r.AddHandler("h", sub, "in", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		_ = m.Ack()
		return []*relay.Message{m.Copy()}, errors.New("after ack")
	}, router.WithOutput(pub, "out")); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	sub.push(t, sub.msg("m1", "", 1))
	if s := sub.waitSettled(t, "m1"); !s.Ack {
		t.Fatal("not acked")
	}
	if ev := sub.events(); !slices.Equal(ev, []string{"ack:m1"}) {
		t.Fatalf("settlements %v", ev)
	}
}
