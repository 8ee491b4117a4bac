package kafka_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// The benchmarks compare relay with franz-go (kgo) used directly for the
// same work, with the same guarantee, against the same kfake cluster in
// the same run:
//
//   - Publish: batches of 256-byte messages with an ID header, produced
//     asynchronously (idempotent, acks=all, same linger and compression)
//     and waited for as a whole (raw: Produce with a promise per record).
//   - Consume: a topic of 4 partitions pre-filled with N messages, drained
//     by a new group member with at most `window` unacked messages,
//     every message acknowledged and its offset committed (raw: PollRecords
//     of up to `window` records, then a synchronous commit of them).
//
//	go test -run '^$' -bench . -benchtime 20000x ./adapters/kafka/
//
// With RELAY_TEST_KAFKA_BROKERS they run against that cluster instead.

const (
	benchPayload    = 256
	benchPartitions = 4
)

// benchCluster is the cluster both sides of a benchmark use.
func benchCluster(b *testing.B) *cluster { return newCluster(b) }

// dropBenchTopic deletes a round's topic and collects the garbage, so that
// kfake's in-memory log does not grow round after round and every round
// starts from the same heap (the GC's work grows with the live heap, and
// with it the noise between rounds).
func (c *cluster) dropBenchTopic(b *testing.B, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close() // now, not at the benchmark's end: rounds must not pile up clients
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, topic); err != nil {
		b.Fatalf("delete topic %s: %v", topic, err)
	}
	runtime.GC()
}

func benchMessages(n int) []*relay.Message {
	msgs := make([]*relay.Message, n)
	body := make([]byte, benchPayload)
	for i := range body {
		body[i] = byte(i)
	}
	for i := range msgs {
		msgs[i] = &relay.Message{ID: relay.NewID(), Payload: body}
	}
	return msgs
}

func rawProducer(b *testing.B, c *cluster, linger time.Duration) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(linger), kgo.ProducerBatchCompression(kgo.SnappyCompression()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// result is one measured run: messages per second of wall-clock time and
// process CPU time per message, both over the timed part only.
// result is one side's round: its rate and its process CPU per message.
type result = relaytest.Round

func measured(n int, wall time.Duration, cpu time.Duration) result {
	return result{Rate: float64(n) / wall.Seconds(), CPU: float64(cpu) / float64(time.Microsecond) / float64(n)}
}

func relayPublishRate(b *testing.B, c *cluster, n, batch int, linger time.Duration) result {
	topic := unique("bench")
	c.createTopic(b, topic, benchPartitions)
	defer c.dropBenchTopic(b, topic)
	pub := relaytest.OpenPublisher(b, c.url("linger", linger.String()))
	defer pub.Close()
	msgs := benchMessages(batch)
	start, cpu := time.Now(), cpuTime()
	relaytest.PublishReused(b, pub, topic, msgs, n)
	return measured(n, time.Since(start), cpuTime()-cpu)
}

func rawPublishRate(b *testing.B, c *cluster, n, batch int, linger time.Duration) result {
	topic := unique("bench")
	c.createTopic(b, topic, benchPartitions)
	defer c.dropBenchTopic(b, topic)
	cl := rawProducer(b, c, linger)
	defer cl.Close()
	body := make([]byte, benchPayload)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			firstErr = err
			mu.Unlock()
		}
		wg.Done()
	}
	start, cpu := time.Now(), cpuTime()
	for done := 0; done < n; done += batch {
		k := min(batch, n-done)
		wg.Add(k)
		for range k {
			r := &kgo.Record{Topic: topic, Value: body, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(relay.NewID())}}}
			cl.Produce(ctx, r, promise)
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
	}
	return measured(n, time.Since(start), cpuTime()-cpu)
}

// relayAsyncPublishRate keeps many batches in flight from one goroutine
// with PublishAsync and waits for every done at the end.
func relayAsyncPublishRate(b *testing.B, c *cluster, n, batch int) result {
	topic := unique("bench")
	c.createTopic(b, topic, benchPartitions)
	defer c.dropBenchTopic(b, topic)
	pub := relaytest.OpenPublisher(b, c.url())
	defer pub.Close()
	ap := pub.(relay.AsyncPublisher)
	body := make([]byte, benchPayload)
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	done := func(err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
		wg.Done()
	}
	start, cpu := time.Now(), cpuTime()
	for sent := 0; sent < n; sent += batch {
		msgs := make([]*relay.Message, min(batch, n-sent))
		for i := range msgs {
			msgs[i] = &relay.Message{ID: relay.NewID(), Payload: body}
		}
		wg.Add(1)
		if err := ap.PublishAsync(ctx, topic, msgs, done); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return measured(n, time.Since(start), cpuTime()-cpu)
}

// rawAsyncPublishRate is franz-go's own pipelining: Produce every record
// from one goroutine, then Flush.
func rawAsyncPublishRate(b *testing.B, c *cluster, n int) result {
	topic := unique("bench")
	c.createTopic(b, topic, benchPartitions)
	defer c.dropBenchTopic(b, topic)
	cl := rawProducer(b, c, 0)
	defer cl.Close()
	body := make([]byte, benchPayload)
	ctx := context.Background()
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	start, cpu := time.Now(), cpuTime()
	for range n {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: body, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(relay.NewID())}}}, promise)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return measured(n, time.Since(start), cpuTime()-cpu)
}

// parallelPublishRate runs g goroutines that share n messages in batches
// of batch, each batch published and waited for by publish.
func parallelPublishRate(n, g, batch int, publish func(k int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				end := next.Add(int64(batch))
				start := int(end) - batch
				if start >= n {
					return
				}
				publish(min(batch, n-start))
			}
		}()
	}
	wg.Wait()
}

// relayParallelPublishRate: g goroutines call Publish with batches.
func relayParallelPublishRate(b *testing.B, c *cluster, n, g, batch int) result {
	topic := unique("bench")
	c.createTopic(b, topic, benchPartitions)
	defer c.dropBenchTopic(b, topic)
	pub := relaytest.OpenPublisher(b, c.url())
	defer pub.Close()
	body := make([]byte, benchPayload)
	ctx := context.Background()
	start, cpu := time.Now(), cpuTime()
	parallelPublishRate(n, g, batch, func(k int) {
		msgs := make([]*relay.Message, k)
		for i := range msgs {
			msgs[i] = &relay.Message{ID: relay.NewID(), Payload: body}
		}
		if err := pub.Publish(ctx, topic, msgs...); err != nil {
			b.Error(err)
		}
	})
	return measured(n, time.Since(start), cpuTime()-cpu)
}

// rawParallelPublishRate: g goroutines Produce batches and wait for them.
func rawParallelPublishRate(b *testing.B, c *cluster, n, g, batch int) result {
	topic := unique("bench")
	c.createTopic(b, topic, benchPartitions)
	defer c.dropBenchTopic(b, topic)
	cl := rawProducer(b, c, 0)
	defer cl.Close()
	body := make([]byte, benchPayload)
	ctx := context.Background()
	start, cpu := time.Now(), cpuTime()
	parallelPublishRate(n, g, batch, func(k int) {
		var wg sync.WaitGroup
		wg.Add(k)
		for range k {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: body, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(relay.NewID())}}}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
		}
		wg.Wait()
	})
	return measured(n, time.Since(start), cpuTime()-cpu)
}

// fill produces n messages into a new topic of benchPartitions partitions.
func fill(b *testing.B, c *cluster, n int) string {
	topic := unique("bench")
	c.createTopic(b, topic, benchPartitions)
	cl := rawProducer(b, c, 5*time.Millisecond)
	defer cl.Close()
	body := make([]byte, benchPayload)
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		r := &kgo.Record{Topic: topic, Value: body, Headers: []kgo.RecordHeader{{Key: "relay-id", Value: []byte(relay.NewID())}}}
		cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	return topic
}

// relayConsumeRate drains a pre-filled topic, acking every message; the
// clock runs from the first message to the end of Close (final commit),
// the CPU count from opening the subscriber. window 0: the default.
func relayConsumeRate(b *testing.B, c *cluster, n, window int, work func([]byte), params ...string) result {
	topic := fill(b, c, n)
	defer c.dropBenchTopic(b, topic)
	cpu := cpuTime()
	if window > 0 {
		params = append([]string{"inflight", fmt.Sprint(window)}, params...)
	}
	sub := relaytest.OpenSubscriber(b, c.subURL(unique("g"), params...))
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		b.Fatal(err)
	}
	var start time.Time
	for i := range n {
		m := <-ch
		if i == 0 {
			start = time.Now()
		}
		work(m.Payload)
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
	if err := sub.Close(); err != nil {
		b.Fatal(err)
	}
	return measured(n, time.Since(start), cpuTime()-cpu)
}

// relayBatchConsumeRate is relayConsumeRate on the driver's batch path
// (driver.BatchSubscriber, what the router's batch handlers and the bridge
// use): batches as the shared layer received them, each message acked.
func relayBatchConsumeRate(b *testing.B, c *cluster, n, window int, work func([]byte)) result {
	topic := fill(b, c, n)
	defer c.dropBenchTopic(b, topic)
	cpu := cpuTime()
	sub := relaytest.OpenSubscriber(b, c.subURL(unique("g"), "inflight", fmt.Sprint(window)))
	bs, ok := sub.(driver.BatchSubscriber)
	if !ok {
		b.Fatalf("%T has no batch path", sub)
	}
	ch, err := bs.SubscribeBatches(context.Background(), topic)
	if err != nil {
		b.Fatal(err)
	}
	var start time.Time
	for got := 0; got < n; {
		batch, ok := <-ch
		if !ok {
			b.Fatalf("subscription ended after %d of %d messages", got, n)
		}
		if got == 0 {
			start = time.Now()
		}
		for _, m := range batch {
			work(m.Payload)
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		got += len(batch)
	}
	if err := sub.Close(); err != nil {
		b.Fatal(err)
	}
	return measured(n, time.Since(start), cpuTime()-cpu)
}

// rawConsumeRate does the same with kgo: poll up to window records (-1:
// every buffered one), process them, commit them synchronously, repeat;
// then leave the group.
func rawConsumeRate(b *testing.B, c *cluster, n, window int, work func([]byte)) result {
	topic := fill(b, c, n)
	defer c.dropBenchTopic(b, topic)
	cpu := cpuTime()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumerGroup(unique("g")), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.HeartbeatInterval(100*time.Millisecond), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var start time.Time
	got := 0
	for got < n {
		fs := cl.PollRecords(ctx, window)
		recs := fs.Records()
		if got == 0 && len(recs) > 0 {
			start = time.Now()
		}
		got += len(recs)
		for _, r := range recs {
			work(r.Value)
		}
		if len(recs) > 0 {
			if err := cl.CommitRecords(ctx, recs...); err != nil {
				b.Fatal(err)
			}
		}
		cl.AllowRebalance()
	}
	cl.Close()
	return measured(n, time.Since(start), cpuTime()-cpu)
}

func BenchmarkPublish(b *testing.B) {
	c := benchCluster(b)
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("relay/batch=%d", batch), func(b *testing.B) {
			b.SetBytes(benchPayload)
			b.ReportMetric(relayPublishRate(b, c, b.N, batch, 0).Rate, "msg/s")
		})
		b.Run(fmt.Sprintf("raw/batch=%d", batch), func(b *testing.B) {
			b.SetBytes(benchPayload)
			b.ReportMetric(rawPublishRate(b, c, b.N, batch, 0).Rate, "msg/s")
		})
	}
}

func BenchmarkConsumeAck(b *testing.B) {
	c := benchCluster(b)
	for _, window := range []int{64, 256} {
		b.Run(fmt.Sprintf("relay/window=%d", window), func(b *testing.B) {
			b.ReportMetric(relayConsumeRate(b, c, b.N, window, noWork).Rate, "msg/s")
		})
		b.Run(fmt.Sprintf("raw/window=%d", window), func(b *testing.B) {
			b.ReportMetric(rawConsumeRate(b, c, b.N, window, noWork).Rate, "msg/s")
		})
	}
}

// BenchmarkRatio runs relay and raw kgo alternately, seven rounds of b.N
// messages each (the order flips every round), and reports the median rate
// of each and their ratio, so that a busy machine affects both alike. It
// also reports the process CPU time per message of each side over the
// timed part (the in-process kfake broker included, which does the same
// work for both), a measure of the abstraction's cost that wall-clock
// noise moves much less. Run it with a fixed count, e.g. -benchtime 20000x.
func BenchmarkRatio(b *testing.B) {
	c := benchCluster(b)
	const rounds = 7
	compare := func(b *testing.B, relaySide, rawSide func(n int) result) {
		relaytest.CompareRounds(b, rounds, relaySide, rawSide)
	}
	for _, linger := range []time.Duration{0, 5 * time.Millisecond} {
		b.Run(fmt.Sprintf("publish/batch=100/linger=%v", linger), func(b *testing.B) {
			compare(b,
				func(n int) result { return relayPublishRate(b, c, n, 100, linger) },
				func(n int) result { return rawPublishRate(b, c, n, 100, linger) })
		})
	}
	b.Run("publish/async/one-goroutine/batch=100", func(b *testing.B) {
		compare(b,
			func(n int) result { return relayAsyncPublishRate(b, c, n, 100) },
			func(n int) result { return rawAsyncPublishRate(b, c, n) })
	})
	b.Run("publish/16-goroutines/batch=100", func(b *testing.B) {
		compare(b,
			func(n int) result { return relayParallelPublishRate(b, c, n, 16, 100) },
			func(n int) result { return rawParallelPublishRate(b, c, n, 16, 100) })
	})
	b.Run("publish/batch=1", func(b *testing.B) {
		compare(b,
			func(n int) result { return relayPublishRate(b, c, n, 1, 0) },
			func(n int) result { return rawPublishRate(b, c, n, 1, 0) })
	})
	b.Run("consume-ack/window=256", func(b *testing.B) {
		compare(b,
			func(n int) result { return relayConsumeRate(b, c, n, 256, noWork) },
			func(n int) result { return rawConsumeRate(b, c, n, 256, noWork) })
	})
	// share_payloads=true, as the bridge's kafka:// sources run: messages
	// share franz-go's fetch buffers instead of copying them.
	b.Run("consume-ack/window=256/share_payloads", func(b *testing.B) {
		compare(b,
			func(n int) result { return relayConsumeRate(b, c, n, 256, noWork, "share_payloads", "true") },
			func(n int) result { return rawConsumeRate(b, c, n, 256, noWork) })
	})
	// Background commits: Settle frees the window slots without waiting
	// for the commit, which the subscription's commit loop sends after
	// commit_interval.
	// Faster on kfake's in-process round trip, but a crash then redelivers
	// the window plus what was acked in the last interval (docs/kafka.md).
	b.Run("consume-ack/window=256/commit_interval=1ms", func(b *testing.B) {
		compare(b,
			func(n int) result { return relayConsumeRate(b, c, n, 256, noWork, "commit_interval", "1ms") },
			func(n int) result { return rawConsumeRate(b, c, n, 256, noWork) })
	})
	b.Run("consume-ack/window=256/batch-path", func(b *testing.B) {
		compare(b,
			func(n int) result { return relayBatchConsumeRate(b, c, n, 256, noWork) },
			func(n int) result { return rawConsumeRate(b, c, n, 256, noWork) })
	})
	// The same with some work per record, as any real consumer has: both
	// sides hash each payload eight times (a few µs).
	b.Run("consume-ack/window=256/hash-work", func(b *testing.B) {
		compare(b,
			func(n int) result { return relayConsumeRate(b, c, n, 256, hashWork) },
			func(n int) result { return rawConsumeRate(b, c, n, 256, hashWork) })
	})
}

func noWork([]byte) {}

// hashSink keeps hashWork's result alive so the compiler cannot drop it.
var hashSink byte

// hashWork stands for a consumer's per-record work: eight SHA-256 sums of
// the payload.
func hashWork(p []byte) {
	for range 8 {
		s := sha256.Sum256(p)
		hashSink ^= s[0]
	}
}

// BenchmarkDelayLateness reports how late delayed messages arrive past
// their DeliverAt (p50/p99/max) on kfake:
//
//	go test -run '^$' -bench DelayLateness -benchtime 200x ./adapters/kafka/
func BenchmarkDelayLateness(b *testing.B) {
	c := benchCluster(b)
	drivertest.BenchmarkDelayLateness(b, drivertest.Harness{
		NewPublisher:  func(t testing.TB) relay.Publisher { return relaytest.OpenPublisher(t, c.url()) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return relaytest.OpenSubscriber(t, c.subURL(group)) },
	})
}

// BenchmarkLatency measures one message in flight (publish, receive, ack,
// repeat) on a topic of one partition through relay and through franz-go
// doing the same work: a synchronous produce (idempotent, acks=all,
// linger 0); a group member's PollRecords of one record; a synchronous
// CommitRecords of it, since relay commits each acked offset (its default
// commit_interval=0: a commit as soon as the acked prefix advances). Idle
// and under a steady load of 2,000 msg/s on another topic, on kfake:
//
//	go test -run '^$' -bench Latency -benchtime 2000x ./adapters/kafka/
func BenchmarkLatency(b *testing.B) {
	c := benchCluster(b)
	h := drivertest.Harness{
		NewTopic: func(t testing.TB) string {
			topic := unique("bench-latency")
			c.createTopic(t, topic, 1)
			return topic
		},
		NewPublisher:  func(t testing.TB) relay.Publisher { return relaytest.OpenPublisher(t, c.url()) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return relaytest.OpenSubscriber(t, c.subURL(group)) },
	}
	raw := func(b *testing.B, topic string) (drivertest.RoundTrip, func()) {
		prod := rawProducer(b, c, 0)
		cons, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumerGroup(unique("g")), kgo.ConsumeTopics(topic),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.BlockRebalanceOnPoll(),
			kgo.FetchMaxWait(200*time.Millisecond), kgo.HeartbeatInterval(100*time.Millisecond), kgo.MetadataMinAge(50*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		body := make([]byte, 100)
		rt := func(ctx context.Context) error {
			id := relay.NewID()
			r := &kgo.Record{Topic: topic, Value: body, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				return err
			}
			for {
				fs := cons.PollRecords(ctx, 1)
				if err := ctx.Err(); err != nil {
					return err
				}
				if errs := fs.Errors(); len(errs) > 0 {
					return errs[0].Err
				}
				recs := fs.Records()
				if len(recs) == 0 {
					cons.AllowRebalance()
					continue
				}
				if got := string(recs[0].Headers[0].Value); got != id {
					return fmt.Errorf("received %s, want %s", got, id)
				}
				err := cons.CommitRecords(ctx, recs[0])
				cons.AllowRebalance()
				return err
			}
		}
		return rt, func() { cons.Close(); prod.Close() }
	}
	drivertest.BenchmarkLatency(b, h, raw, drivertest.LatencyOptions{})
}
