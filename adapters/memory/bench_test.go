package memory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/adaptertest"
	"github.com/go-relay/relay/adapters/memory"
)

// BenchmarkPublish measures publishing 100-byte messages in batches of 100.
func BenchmarkPublish(b *testing.B) {
	pub := memory.NewPublisher("bench-pub", memory.PublisherConfig{})
	defer pub.Close()
	sub, _ := memory.NewSubscriber("bench-pub", memory.SubscriberConfig{Group: "g"})
	defer sub.Close()
	ctx := context.Background()
	topic := "bench-" + relay.NewID()
	_ = sub.(relay.Provisioner).Provision(ctx, topic)
	payload := make([]byte, 100)
	batch := make([]*relay.Message, 100)
	b.SetBytes(100)
	b.ReportAllocs()
	defer reportCPU(b)()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(batch) {
		for j := range batch {
			batch[j] = relay.NewMessage(payload)
		}
		if err := pub.Publish(ctx, topic, batch...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConsumeAck measures receiving and acking pre-published messages
// with the default in-flight window.
func BenchmarkConsumeAck(b *testing.B) {
	pub := memory.NewPublisher("bench-consume", memory.PublisherConfig{})
	defer pub.Close()
	sub, _ := memory.NewSubscriber("bench-consume", memory.SubscriberConfig{Group: "g", InFlight: 256})
	defer sub.Close()
	ctx := context.Background()
	topic := "bench-" + relay.NewID()
	_ = sub.(relay.Provisioner).Provision(ctx, topic)
	payload := make([]byte, 100)
	batch := make([]*relay.Message, 0, 1000)
	for i := 0; i < b.N; i++ {
		batch = append(batch, relay.NewMessage(payload))
		if len(batch) == cap(batch) || i == b.N-1 {
			if err := pub.Publish(ctx, topic, batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100)
	b.ReportAllocs()
	defer reportCPU(b)()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := <-ch
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPU starts counting the process's CPU time; the returned func
// reports it per operation as cpu-ns/op. On a shared machine this varies
// less than ns/op, which counts the time other processes hold the CPU.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		b.StopTimer()
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}

func BenchmarkDelayLateness(b *testing.B) {
	adaptertest.BenchmarkDelayLateness(b, adaptertest.Harness{
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
	h := adaptertest.Harness{
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
	raw := func(b *testing.B, topic string) (adaptertest.RoundTrip, func()) {
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
	adaptertest.BenchmarkLatency(b, h, raw, adaptertest.LatencyOptions{})
}
