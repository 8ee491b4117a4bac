package middleware_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// fakeClock advances only when something waits on it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// handlerCtx is the context a router gives handler "h" of topic "in".
func handlerCtx() context.Context {
	return router.WithHandlerInfo(context.Background(), "h", "in")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// env is a fresh mem:// broker for one test.
type env struct {
	t      *testing.T
	broker string
	pub    relay.Publisher
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, broker: "mw-" + relay.NewID()}
	e.pub = memory.NewPublisher(e.broker, memory.PublisherConfig{})
	t.Cleanup(func() { _ = e.pub.Close() })
	return e
}

// sub opens a subscriber of group and provisions topics for it.
func (e *env) sub(group string, topics ...string) relay.Subscriber {
	e.t.Helper()
	s, err := memory.NewSubscriber(e.broker, memory.SubscriberConfig{Group: group})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, topic := range topics {
		if err := s.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
			e.t.Fatal(err)
		}
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

func (e *env) publish(topic string, msgs ...*relay.Message) {
	e.t.Helper()
	if err := e.pub.Publish(context.Background(), topic, msgs...); err != nil {
		e.t.Fatal(err)
	}
}

// drain publishes a sentinel to topic and returns the messages group
// receives before it, acking them: what the group holds, checked without
// waiting for a timeout (mem:// keeps publish order).
func (e *env) drain(group, topic string) []*relay.Message {
	e.t.Helper()
	sentinel := relay.NewMessage([]byte("sentinel"))
	e.publish(topic, sentinel)
	s, err := memory.NewSubscriber(e.broker, memory.SubscriberConfig{Group: group})
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := s.Subscribe(ctx, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*relay.Message
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				e.t.Fatal("subscription ended before the sentinel")
			}
			_ = m.Ack()
			if m.ID == sentinel.ID {
				return out
			}
			out = append(out, m)
		case <-ctx.Done():
			e.t.Fatalf("sentinel not received on %s/%s", topic, group)
		}
	}
}

// run starts r and returns a func that stops it and returns Run's error.
func run(t *testing.T, r *router.Router) func() error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(context.Background()) }()
	select {
	case <-r.Running():
	case err := <-errc:
		t.Fatalf("Run: %v", err)
	}
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() { _ = r.Close(); err = <-errc })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newRouter(t *testing.T, mw ...router.Middleware) *router.Router {
	t.Helper()
	r, err := router.New(router.Config{RedeliveryDelay: router.NoRedeliveryDelay, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Use(mw...); err != nil {
		t.Fatal(err)
	}
	return r
}

// waitFor polls cond (the router works asynchronously); it fails after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// counter counts calls per message ID.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) inc(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
	return c.n[id]
}

func (c *counter) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}
