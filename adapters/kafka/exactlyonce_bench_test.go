package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/router"
)

// BenchmarkForwardExactlyOnce forwards b.N messages kafka -> kafka through
// a router handler (concurrency 8, inflight 256, 4 partitions) twice per
// round, at-least-once (a plain subscriber and publisher) and exactly-once
// (kafka.NewExactlyOnce, one transaction per poll), two rounds
// interleaved, and reports both rates and their ratio. The clock runs from
// the handler's first call to the last output a read_committed reader
// receives (so an exactly-once output counts once its transaction
// committed), and connecting and joining the group are not counted.
//
//	go test -run '^$' -bench ForwardExactlyOnce -benchtime 2000x ./adapters/kafka/
func BenchmarkForwardExactlyOnce(b *testing.B) {
	c := benchCluster(b)
	var alo, eo time.Duration
	for range 2 {
		alo += forwardOnce(b, c, false)
		eo += forwardOnce(b, c, true)
	}
	aloRate := float64(2*b.N) / alo.Seconds()
	eoRate := float64(2*b.N) / eo.Seconds()
	b.ReportMetric(aloRate, "alo-msg/s")
	b.ReportMetric(eoRate, "eo-msg/s")
	b.ReportMetric(eoRate/aloRate, "eo/alo")
	b.ReportMetric(0, "ns/op")
}

// forwardOnce pre-fills a topic with b.N messages, forwards it and returns
// the time from the first handler call to the last output read.
func forwardOnce(b *testing.B, c *cluster, exactly bool) time.Duration {
	in, out, group := unique("bin"), unique("bout"), unique("bg")
	c.createTopic(b, in, benchPartitions)
	c.createTopic(b, out, benchPartitions)
	src := relaytest.OpenPublisher(b, c.url())
	msgs := benchMessages(b.N)
	for i := 0; i < len(msgs); i += 500 {
		if err := src.Publish(context.Background(), in, msgs[i:min(i+500, len(msgs))]...); err != nil {
			b.Fatal(err)
		}
	}
	var sub relay.Subscriber
	var pub relay.Publisher
	g := relay.AtLeastOnce
	if exactly {
		sub, pub = openPair(b, c, group, unique("tx"))
		g = relay.ExactlyOnce
	} else {
		sub, pub = relaytest.OpenSubscriber(b, c.subURL(group)), relaytest.OpenPublisher(b, c.url())
	}
	reader := relaytest.OpenSubscriber(b, c.subURL(unique("reader"), "isolation", "read_committed"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := reader.Subscribe(ctx, out)
	if err != nil {
		b.Fatal(err)
	}
	r, err := router.New(router.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var start atomic.Int64 // unix nanoseconds of the first call
	fwd := func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		start.CompareAndSwap(0, time.Now().UnixNano())
		return []*relay.Message{m.Copy()}, nil
	}
	if err := r.AddHandler("fwd", sub, in, fwd, router.WithGuarantee(g), router.WithOutput(pub, out),
		router.WithConcurrency(8)); err != nil {
		b.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	seen := make(map[string]bool, b.N)
	for len(seen) < b.N {
		m := recv(b, ch)
		seen[m.ID] = true
		_ = m.Ack()
	}
	took := time.Since(time.Unix(0, start.Load()))
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return took
}
