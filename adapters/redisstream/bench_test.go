package redisstream_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// Benchmarks compare relay with go-redis doing the same work on the same
// server in the same run: 100-byte payloads with a message ID field,
// published in pipelined batches of 100; consumed with a window of 256
// (XREADGROUP COUNT 256) and acknowledged in XACK batches.

func BenchmarkPublish(b *testing.B) {
	payload := make([]byte, 100)
	ctx := context.Background()
	b.Run("relay", func(b *testing.B) {
		raw := rawClient(b)
		pub := openPub(b)
		topic := relaytest.Unique("bench-pub")
		b.Cleanup(func() { raw.Del(ctx, topic) })
		batch := make([]*relay.Message, relaytest.RatioBatch)
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		cpu := startCPU(b)
		for i := 0; i < b.N; i += relaytest.RatioBatch {
			for j := range batch {
				batch[j] = relay.NewMessage(payload)
			}
			if err := pub.Publish(ctx, topic, batch...); err != nil {
				b.Fatal(err)
			}
		}
		cpu.stop(b)
	})
	b.Run("raw", func(b *testing.B) {
		raw := rawClient(b)
		topic := relaytest.Unique("bench-pub")
		b.Cleanup(func() { raw.Del(ctx, topic) })
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		cpu := startCPU(b)
		for i := 0; i < b.N; i += relaytest.RatioBatch {
			cmds, err := raw.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j := 0; j < relaytest.RatioBatch; j++ {
					p.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []any{"id", relay.NewID(), "payload", payload}})
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range cmds {
				if c.Err() != nil {
					b.Fatal(c.Err())
				}
			}
		}
		cpu.stop(b)
	})
}

// cpuMeter reports the process's CPU time (user+system) per operation as
// "cpu-ns/op": on a shared machine wall time depends on the neighbours,
// CPU time much less.
type cpuMeter struct{ start time.Duration }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU(b *testing.B) *cpuMeter {
	b.ResetTimer()
	return &cpuMeter{start: cpuNow()}
}

func (m *cpuMeter) stop(b *testing.B) {
	b.StopTimer()
	b.ReportMetric(float64(cpuNow()-m.start)/float64(b.N), "cpu-ns/op")
}

// fill publishes n entries to topic outside the timed part.
func fill(b *testing.B, raw *redis.Client, topic string, n int) {
	ctx := context.Background()
	payload := make([]byte, 100)
	for i := 0; i < n; i += 1000 {
		_, err := raw.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(n, i+1000); j++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []any{"id", relay.NewID(), "payload", payload}})
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkConsumeAck(b *testing.B) {
	ctx := context.Background()
	b.Run("relay", func(b *testing.B) {
		raw := rawClient(b)
		topic, group := relaytest.Unique("bench-consume"), relaytest.Unique("g")
		b.Cleanup(func() { raw.Del(ctx, topic) })
		sub := openSub(b, group, "inflight", "256")
		provision(b, sub, topic)
		fill(b, raw, topic, b.N)
		ch, _ := relaytest.Subscribe(b, sub, topic)
		b.SetBytes(100)
		b.ReportAllocs()
		cpu := startCPU(b)
		for i := 0; i < b.N; i++ {
			m := <-ch
			if len(m.Payload) != 100 {
				b.Fatal("bad payload")
			}
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		cpu.stop(b)
		_ = sub.Close()
		if n := pendingCount(b, raw, topic, group); n != 0 {
			b.Fatalf("%d entries left pending", n)
		}
	})
	b.Run("raw", func(b *testing.B) {
		raw := rawClient(b)
		topic, group := relaytest.Unique("bench-consume"), relaytest.Unique("g")
		b.Cleanup(func() { raw.Del(ctx, topic) })
		if err := raw.XGroupCreateMkStream(ctx, topic, group, "0").Err(); err != nil {
			b.Fatal(err)
		}
		fill(b, raw, topic, b.N)
		b.SetBytes(100)
		b.ReportAllocs()
		cpu := startCPU(b)
		ids := make([]string, 0, relaytest.RatioWindow)
		for got := 0; got < b.N; {
			res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: group, Consumer: "raw", Streams: []string{topic, ">"}, Count: relaytest.RatioWindow, Block: time.Second,
			}).Result()
			if err != nil {
				b.Fatal(err)
			}
			ids = ids[:0]
			for _, m := range res[0].Messages {
				if p, _ := m.Values["payload"].(string); len(p) != 100 {
					b.Fatal("bad payload")
				}
				ids = append(ids, m.ID)
			}
			if err := raw.XAck(ctx, topic, group, ids...).Err(); err != nil {
				b.Fatal(err)
			}
			got += len(ids)
		}
		cpu.stop(b)
		if n := pendingCount(b, raw, topic, group); n != 0 {
			b.Fatalf("%d entries left pending", n)
		}
	})
}

// BenchmarkRatio compares relay with go-redis doing the same work on the
// same server in the same run (relaytest.PublishConsumeRatio): the raw
// side pipelines one XADD per message, and reads with XREADGROUP and acks
// each batch with one XACK. Use a fixed count, e.g. -benchtime 20000x.
func BenchmarkRatio(b *testing.B) {
	relaytest.PublishConsumeRatio(b, relayPublishRate, rawPublishRate, relayConsumeRate, rawConsumeRate)
}

func relayPublishRate(b *testing.B, n int) float64 {
	raw := rawClient(b)
	pub := openPub(b)
	topic := relaytest.Unique("bench-pub")
	defer raw.Del(context.Background(), topic)
	return relaytest.PublishRate(b, pub, topic, n, relaytest.RatioBatch, make([]byte, relaytest.RatioPayload))
}

func rawPublishRate(b *testing.B, n int) float64 {
	ctx := context.Background()
	raw := rawClient(b)
	topic := relaytest.Unique("bench-pub")
	defer raw.Del(ctx, topic)
	payload := make([]byte, 100)
	start := time.Now()
	for done := 0; done < n; done += relaytest.RatioBatch {
		k := min(relaytest.RatioBatch, n-done)
		cmds, err := raw.Pipelined(ctx, func(p redis.Pipeliner) error {
			for range k {
				p.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []any{"id", relay.NewID(), "payload", payload}})
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cmds {
			if c.Err() != nil {
				b.Fatal(c.Err())
			}
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

func relayConsumeRate(b *testing.B, n int) float64 {
	return relayConsumeRateWith(b, n, "inflight", fmt.Sprint(relaytest.RatioWindow))
}

// relayConsumeRateWith is relayConsumeRate with the subscriber URL's
// parameters besides group=.
func relayConsumeRateWith(b *testing.B, n int, params ...string) float64 {
	raw := rawClient(b)
	topic, group := relaytest.Unique("bench-consume"), relaytest.Unique("g")
	defer raw.Del(context.Background(), topic)
	sub := openSub(b, group, params...)
	provision(b, sub, topic)
	fill(b, raw, topic, n)
	return relaytest.AckLoopRate(b, sub, topic, n, nil)
}

func rawConsumeRate(b *testing.B, n int) float64 {
	ctx := context.Background()
	raw := rawClient(b)
	topic, group := relaytest.Unique("bench-consume"), relaytest.Unique("g")
	defer raw.Del(ctx, topic)
	if err := raw.XGroupCreateMkStream(ctx, topic, group, "0").Err(); err != nil {
		b.Fatal(err)
	}
	fill(b, raw, topic, n)
	ids := make([]string, 0, relaytest.RatioWindow)
	start := time.Now()
	for got := 0; got < n; {
		res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: "raw", Streams: []string{topic, ">"}, Count: relaytest.RatioWindow, Block: time.Second,
		}).Result()
		if err != nil {
			b.Fatal(err)
		}
		ids = ids[:0]
		for _, m := range res[0].Messages {
			if p, _ := m.Values["payload"].(string); len(p) != 100 {
				b.Fatal("bad payload")
			}
			ids = append(ids, m.ID)
		}
		if err := raw.XAck(ctx, topic, group, ids...).Err(); err != nil {
			b.Fatal(err)
		}
		got += len(ids)
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkDelayLateness reports how late delayed messages arrive past
// their DeliverAt (p50/p99/max), with the default delay_poll:
//
//	go test -run '^$' -bench DelayLateness -benchtime 200x ./adapters/redisstream/
func BenchmarkDelayLateness(b *testing.B) {
	raw := rawClient(b)
	drivertest.BenchmarkDelayLateness(b, drivertest.Harness{
		NewTopic: func(testing.TB) string {
			topic := relaytest.Unique("bench-delay")
			b.Cleanup(func() { raw.Del(context.Background(), topic, topic+redisstream.DelayedSuffix) })
			return topic
		},
		NewPublisher:  func(t testing.TB) relay.Publisher { return openPub(t) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return openSub(t, group) },
	})
}

// BenchmarkLatency measures one message in flight (publish, receive, ack,
// repeat) through relay and through go-redis doing the same work (XADD of
// an ID and a 100-byte payload; XREADGROUP COUNT 1 BLOCK; XACK), idle and
// under a steady load of 2,000 msg/s on another stream:
//
//	go test -run '^$' -bench Latency -benchtime 2000x ./adapters/redisstream/
func BenchmarkLatency(b *testing.B) {
	ctx := context.Background()
	raw := rawClient(b)
	h := drivertest.Harness{
		NewTopic: func(testing.TB) string {
			topic := relaytest.Unique("bench-latency")
			b.Cleanup(func() { raw.Del(ctx, topic) })
			return topic
		},
		NewPublisher:  func(t testing.TB) relay.Publisher { return openPub(t) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return openSub(t, group) },
	}
	drivertest.BenchmarkLatency(b, h, rawLatencyLoop, drivertest.LatencyOptions{})
}

func rawLatencyLoop(b *testing.B, topic string) (drivertest.RoundTrip, func()) {
	raw := rawClient(b)
	group := relaytest.Unique("g")
	if err := raw.XGroupCreateMkStream(context.Background(), topic, group, "$").Err(); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 100)
	rt := func(ctx context.Context) error {
		id := relay.NewID()
		if err := raw.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []any{"id", id, "payload", payload}}).Err(); err != nil {
			return err
		}
		res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: "raw", Streams: []string{topic, ">"}, Count: 1, Block: latencyBlock,
		}).Result()
		if err != nil {
			return err
		}
		m := res[0].Messages[0]
		if got, _ := m.Values["id"].(string); got != id {
			return fmt.Errorf("received %s, want %s", got, id)
		}
		return raw.XAck(ctx, topic, group, m.ID).Err()
	}
	return rt, func() {}
}

// latencyBlock is the raw loop's XREADGROUP BLOCK.
const latencyBlock = 5 * time.Second
