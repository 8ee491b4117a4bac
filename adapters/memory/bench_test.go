package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/driver/drivertest"
)

// benchBacklog bounds the messages a benchmark leaves in the broker: a
// benchmark that keeps b.N messages alive measures the garbage collector
// marking a heap that grows with b.N (ns/op doubled from b.N=10⁵ to 10⁷),
// not the cost of a message. Between chunks the timer stops.
const benchBacklog = 10_000

// benchTimer is b's timer, the process's CPU time and its heap
// allocations while it runs, so that cpu-ns/op and allocs/msg, like ns/op,
// leave out what runs while it is stopped.
type benchTimer struct {
	b      *testing.B
	start  time.Duration
	cpu    time.Duration
	mstart uint64
	allocs uint64
}

func startBench(b *testing.B) *benchTimer {
	b.ReportAllocs()
	b.ResetTimer()
	return &benchTimer{b: b, start: processCPU(), mstart: mallocs()}
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

func (t *benchTimer) stop() {
	t.b.StopTimer()
	t.cpu += processCPU() - t.start
	t.allocs += mallocs() - t.mstart
}

func (t *benchTimer) resume() {
	t.mstart = mallocs()
	t.start = processCPU()
	t.b.StartTimer()
}

// done stops the timer and reports the CPU time per operation as
// cpu-ns/op (on a shared machine it varies less than ns/op, which counts
// the time other processes hold the CPU) and the heap allocations per
// message as allocs/msg, which allocs/op rounds down to a whole number.
func (t *benchTimer) done() {
	t.stop()
	t.b.ReportMetric(float64(t.cpu)/float64(t.b.N), "cpu-ns/op")
	t.b.ReportMetric(float64(t.allocs)/float64(t.b.N), "allocs/msg")
}

type topicRemover interface {
	RemoveTopic(ctx context.Context, topic string) error
}

// BenchmarkPublish measures publishing 100-byte messages in batches of 100
// through mem:// opened with the default URL parameters, to a topic with
// one group that does not consume; every benchBacklog messages the timer
// stops and the topic is removed. NewMessage counts relay.NewMessage (its
// UUIDv7 ID) in the timed loop; Prebuilt creates the messages while the
// timer is stopped, and so counts only the publish.
func BenchmarkPublish(b *testing.B) {
	b.Run("NewMessage", func(b *testing.B) { benchPublish(b, false) })
	b.Run("Prebuilt", func(b *testing.B) { benchPublish(b, true) })
}

func benchPublish(b *testing.B, prebuilt bool) {
	ctx := context.Background()
	pub, err := relay.OpenPublisher(ctx, "mem://bench-pub")
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	sub, err := relay.OpenSubscriber(ctx, "mem://bench-pub?group=g")
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	topic := "bench-" + relay.NewID()
	reset := func() {
		if err := sub.(topicRemover).RemoveTopic(ctx, topic); err != nil {
			b.Fatal(err)
		}
		if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
			b.Fatal(err)
		}
	}
	reset()
	payload := make([]byte, 100)
	var chunk []*relay.Message
	if prebuilt {
		chunk = make([]*relay.Message, benchBacklog)
	}
	const batch = 100
	b.SetBytes(100)
	t := startBench(b)
	defer t.done()
	for i := 0; i < b.N; {
		t.stop()
		reset()
		n := min(benchBacklog, b.N-i)
		if prebuilt {
			for j := range n {
				chunk[j] = relay.NewMessage(payload)
			}
		}
		t.resume()
		for j := 0; j < n; j += batch {
			k := min(batch, n-j)
			var msgs []*relay.Message
			if prebuilt {
				msgs = chunk[j : j+k]
			} else {
				msgs = make([]*relay.Message, k)
				for x := range msgs {
					msgs[x] = relay.NewMessage(payload)
				}
			}
			if err := pub.Publish(ctx, topic, msgs...); err != nil {
				b.Fatal(err)
			}
		}
		i += n
	}
}

// BenchmarkConsumeAck measures receiving and acking 100-byte messages from
// a subscription of mem:// opened with the default URL parameters (an
// in-flight window of 64). The messages are published benchBacklog at a
// time while the timer is stopped.
func BenchmarkConsumeAck(b *testing.B) {
	ctx := context.Background()
	pub, err := relay.OpenPublisher(ctx, "mem://bench-consume")
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	sub, err := relay.OpenSubscriber(ctx, "mem://bench-consume?group=g")
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	topic := "bench-" + relay.NewID()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 100)
	chunk := make([]*relay.Message, 0, benchBacklog)
	b.SetBytes(100)
	t := startBench(b)
	defer t.done()
	for i := 0; i < b.N; {
		t.stop()
		n := min(benchBacklog, b.N-i)
		chunk = chunk[:0]
		for range n {
			chunk = append(chunk, relay.NewMessage(payload))
		}
		if err := pub.Publish(ctx, topic, chunk...); err != nil {
			b.Fatal(err)
		}
		clear(chunk)
		t.resume()
		for range n {
			m := <-ch
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		i += n
	}
}

func BenchmarkDelayLateness(b *testing.B) {
	drivertest.BenchmarkDelayLateness(b, drivertest.Harness{
		NewPublisher: func(testing.TB) relay.Publisher { return memory.NewPublisher("bench-delay", memory.PublisherConfig{}) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			s, err := memory.NewSubscriber("bench-delay", memory.SubscriberConfig{Group: group})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

// BenchmarkLatency measures one message in flight through relay's memory
// backend against a buffered Go channel doing the hand-off alone, so the
// delta is what relay's layers (driver, delivery channel, settlement) add
// to a round trip by themselves:
//
//	go test -run '^$' -bench Latency -benchtime 20000x ./adapters/memory/
func BenchmarkLatency(b *testing.B) {
	h := drivertest.Harness{
		NewPublisher: func(testing.TB) relay.Publisher {
			return memory.NewPublisher("bench-latency", memory.PublisherConfig{})
		},
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			s, err := memory.NewSubscriber("bench-latency", memory.SubscriberConfig{Group: group})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	raw := func(b *testing.B, topic string) (drivertest.RoundTrip, func()) {
		ch := make(chan *relay.Message, 1)
		body := make([]byte, 100)
		return func(ctx context.Context) error {
			m := relay.NewMessage(body)
			ch <- m
			if got := <-ch; got.ID != m.ID {
				return fmt.Errorf("received %s, want %s", got.ID, m.ID)
			}
			return nil
		}, func() {}
	}
	drivertest.BenchmarkLatency(b, h, raw, drivertest.LatencyOptions{})
}
