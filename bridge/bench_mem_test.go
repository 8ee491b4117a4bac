package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// BenchmarkForwardMem measures the bridge's own cost: a route forwarding
// a backlog of b.N messages from one mem:// broker to another, so that no
// broker round trip hides the forwarding path (the handler chain, the
// counters, the batcher). Compare builds with:
//
//	go test -run '^$' -bench BenchmarkForwardMem -benchmem -count 5 ./bridge
func BenchmarkForwardMem(b *testing.B) { forwardMem(b, nil) }

// BenchmarkForwardMemDedup is BenchmarkForwardMem on a route with dedup,
// so that what it measures beyond BenchmarkForwardMem is the dedup
// store's cost: every message is reserved before its batch is published
// and committed after. store=redis uses the shared Redis (a real round
// trip per store call):
//
//	go test -run '^$' -bench BenchmarkForwardMemDedup -benchtime 20000x -count 3 ./bridge
func BenchmarkForwardMemDedup(b *testing.B) {
	b.Run("store=memory", func(b *testing.B) { forwardMem(b, &bridge.Dedup{Store: "memory"}) })
	b.Run("store=redis", func(b *testing.B) {
		testenv.HoldBroker(b, "redis")
		forwardMem(b, &bridge.Dedup{Store: testenv.Redis(b), TTL: time.Minute})
	})
}

// forwardMem forwards b.N messages between two mem:// brokers on a route
// with dedup (nil: none).
func forwardMem(b *testing.B, dedup *bridge.Dedup) {
	src, dst := "mem://"+uniq("bench-a"), "mem://"+uniq("bench-b")
	provisionB(b, src, "bridge", "in")
	provisionB(b, dst, "reader", "out")
	msgs := make([]*relay.Message, b.N)
	for i := range msgs {
		msgs[i] = relay.NewMessage(make([]byte, 512))
	}
	pub, err := relay.OpenPublisher(context.Background(), src)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	for len(msgs) > 0 {
		n := min(len(msgs), 1000)
		if err := pub.Publish(context.Background(), "in", msgs[:n]...); err != nil {
			b.Fatal(err)
		}
		msgs = msgs[n:]
	}
	reg := prometheus.NewRegistry()
	br, err := bridge.New(bridge.Config{HTTP: bridge.HTTPConfig{Disabled: true}, Routes: []bridge.Route{{
		Name: "bench", From: bridge.Source{URL: src, Topic: "in", Group: "bridge"}, To: bridge.Destination{URL: dst, Topic: "out"},
		Dedup: dedup,
	}}}, bridge.Options{Logger: quiet, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	for forwarded(b, reg) < float64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// provisionB makes group exist on url for topic, so that what the bridge
// forwards is kept.
func provisionB(b *testing.B, url, group, topic string) {
	sub, err := relay.OpenSubscriber(context.Background(), url+"?group="+group)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(context.Background(), topic); err != nil {
			b.Fatal(err)
		}
	}
}
