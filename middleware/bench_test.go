package middleware_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// benchStack runs b.N prefilled messages through a router with mw on mem://.
func benchStack(b *testing.B, mw ...router.Middleware) {
	broker := "mwbench-" + relay.NewID()
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
	for i := 0; i < b.N; i++ {
		batch = append(batch, &relay.Message{ID: relay.NewID(), Payload: payload})
		if len(batch) == cap(batch) || i == b.N-1 {
			if err := pub.Publish(context.Background(), "in", batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	var n, sink atomic.Int64
	done := make(chan struct{})
	r, _ := router.New(router.Config{Logger: slog.New(slog.DiscardHandler)})
	_ = r.Use(mw...)
	_ = r.AddHandler("bench", sub, "in", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		sink.Add(int64(len(m.Payload)))
		if n.Add(1) == int64(b.N) {
			close(done)
		}
		return nil, nil
	})
	r.Own(sub)
	b.ReportAllocs()
	b.ResetTimer()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(context.Background()) }()
	<-done
	b.StopTimer()
	_ = r.Close()
	<-errc
}

func BenchmarkRouterNoMiddleware(b *testing.B) { benchStack(b) }

// BenchmarkRouterStandardStack: CorrelationID, PoisonQueue, Retry, Dedup
// (memory store), Timeout, Recoverer — the recommended order without
// metrics and tracing.
func BenchmarkRouterStandardStack(b *testing.B) {
	poison, _ := middleware.PoisonQueue(middleware.PoisonConfig{Publisher: nopPublisher{}, Topic: "poison"})
	retry, _ := middleware.Retry(middleware.RetryConfig{})
	dedup, _ := middleware.Dedup(middleware.DedupConfig{Store: middleware.NewMemoryStore(middleware.MemoryStoreConfig{})})
	benchStack(b, middleware.CorrelationID, poison, retry, dedup, middleware.Timeout(time.Minute), middleware.Recoverer)
}

type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, string, ...*relay.Message) error { return nil }
func (nopPublisher) Close() error                                             { return nil }
