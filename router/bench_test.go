package router_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/router"
)

// work is the same per-message work for every benchmark.
func work(m *relay.Message, sink *atomic.Int64) { sink.Add(int64(len(m.Payload))) }

// prefill publishes n messages to topic of a fresh broker whose group g exists.
func prefill(b *testing.B, n int) (broker string, sub relay.Subscriber) {
	b.Helper()
	broker = "bench-" + relay.NewID()
	pub := memory.NewPublisher(broker, memory.PublisherConfig{})
	defer pub.Close()
	sub, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "g", InFlight: 256})
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.(relay.Provisioner).Provision(context.Background(), "in"); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 128)
	batch := make([]*relay.Message, 0, 1000)
	for i := 0; i < n; i++ {
		batch = append(batch, &relay.Message{ID: relay.NewID(), Payload: payload})
		if len(batch) == cap(batch) || i == n-1 {
			if err := pub.Publish(context.Background(), "in", batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return broker, sub
}

// BenchmarkPlainSubscribeLoop is the baseline: receive, work, ack.
func BenchmarkPlainSubscribeLoop(b *testing.B) {
	_, sub := prefill(b, b.N)
	defer sub.Close()
	var sink atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	ch, err := sub.Subscribe(ctx, "in")
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		m := <-ch
		work(m, &sink)
		_ = m.Ack()
	}
	b.StopTimer()
}

func benchRouter(b *testing.B, conc int, keyed bool) {
	_, sub := prefill(b, b.N)
	var sink atomic.Int64
	var n atomic.Int64
	done := make(chan struct{})
	total := int64(b.N)
	h := func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		work(m, &sink)
		if n.Add(1) == total {
			close(done)
		}
		return nil, nil
	}
	r, err := router.New(router.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.AddHandler("bench", sub, "in", h, router.WithConcurrency(conc)); err != nil {
		b.Fatal(err)
	}
	r.Own(sub)
	runUntil(b, r, done)
}

// runUntil times r from Run until done is closed, then closes r.
func runUntil(b *testing.B, r *router.Router, done <-chan struct{}) {
	b.ReportAllocs()
	b.ResetTimer()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(context.Background()) }()
	<-done
	b.StopTimer()
	if err := r.Close(); err != nil {
		b.Fatal(err)
	}
	<-errc
}

// BenchmarkRouter measures the router (no middleware) doing the same work.
func BenchmarkRouter(b *testing.B)              { benchRouter(b, 1, false) }
func BenchmarkRouterConcurrency4(b *testing.B)  { benchRouter(b, 4, false) }
func BenchmarkRouterConcurrency16(b *testing.B) { benchRouter(b, 16, false) }

// BenchmarkBatchHandler does the same work as BenchmarkRouter through a
// batch handler with the default batch options (64 messages, 50ms wait);
// the subscriber's window of 256 lets batches fill. Like the other
// benchmarks, an op is a message, so ns/op is the cost per message.
func BenchmarkBatchHandler(b *testing.B) {
	_, sub := prefill(b, b.N)
	var sink atomic.Int64
	var n, batches atomic.Int64
	done := make(chan struct{})
	total := int64(b.N)
	h := func(_ context.Context, msgs []*relay.Message) error {
		for _, m := range msgs {
			work(m, &sink)
		}
		batches.Add(1)
		if n.Add(int64(len(msgs))) == total {
			close(done)
		}
		return nil
	}
	r, err := router.New(router.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.AddBatchHandler("bench", sub, "in", h); err != nil {
		b.Fatal(err)
	}
	r.Own(sub)
	runUntil(b, r, done)
	b.ReportMetric(float64(b.N)/float64(batches.Load()), "msgs/batch")
}
