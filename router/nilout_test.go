package router_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// A handler that returns a nil message among its outputs fails with an
// error matching relay.ErrNilMessage that names the handler and the
// index: no panic (in middleware that touches the outputs, in an output's
// Match, or in the publisher), nothing published, the input nacked.
func TestNilOutputRefused(t *testing.T) {
	const broker = "router-nil-output"
	sub := newFakeSub()
	keyed := newFakePub()
	out := memory.NewPublisher(broker, memory.PublisherConfig{})
	t.Cleanup(func() { _ = out.Close() })
	readUntilSentinel(t, broker, "check", "out") // the group exists: mem:// keeps what is published for it
	var mu sync.Mutex
	var seen error
	r := newRouter(t, router.Config{RedeliveryDelay: func(_ *relay.Message, err error) time.Duration {
		mu.Lock()
		seen = err
		mu.Unlock()
		return 0
	}})
	err := r.AddHandler("nil-out", sub, "in", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		return []*relay.Message{m.Copy(), nil}, nil
	}, router.WithMiddleware(middleware.CorrelationID), router.WithOutputs(
		router.Output{Publisher: keyed, Topic: "keyed", Match: func(m *relay.Message) bool { return m.Key != "" }},
		router.Output{Publisher: out, Topic: "out"},
	))
	if err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	sub.push(t, sub.msg("m1", "k", 1))
	if s := sub.waitSettled(t, "m1"); s.Ack {
		t.Fatal("a message whose handler returned a nil output was acked")
	}
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(seen, relay.ErrNilMessage) || !strings.Contains(seen.Error(), `handler "nil-out"`) || !strings.Contains(seen.Error(), "index 1") {
		t.Fatalf("handler error %v, want relay.ErrNilMessage naming the handler and index 1", seen)
	}
	if got := keyed.published("keyed"); len(got) != 0 {
		t.Errorf("%d message(s) published to the matching output", len(got))
	}
	if got := readUntilSentinel(t, broker, "check", "out"); len(got) != 0 {
		t.Errorf("messages %v published to the catch-all output", got)
	}
}
