package amqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The benchmarks compare relay with amqp091-go used directly for the same
// work on the same broker in the same run:
//
//   - Publish: batches of persistent, mandatory messages on a channel in
//     confirm mode, each batch waited for as a whole (raw: NotifyPublish
//     bookkeeping, the usual asynchronous-confirm pattern).
//   - Consume: a queue pre-filled with b.N messages drained with a prefetch
//     window, every message acknowledged (raw: Ack per delivery).
//
//	go test -run '^$' -bench . -benchtime 20000x ./adapters/amqp/

const benchPayload = 256

func benchMessages(n int) []*relay.Message {
	msgs := make([]*relay.Message, n)
	body := make([]byte, benchPayload)
	for i := range msgs {
		msgs[i] = &relay.Message{ID: relay.NewID(), Payload: body}
	}
	return msgs
}

func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("relay/batch=%d", batch), func(b *testing.B) { benchRelayPublish(b, batch) })
		b.Run(fmt.Sprintf("raw/batch=%d", batch), func(b *testing.B) { benchRawPublish(b, batch) })
	}
}

// benchTopic provisions a topic with one group so that mandatory
// publishes are routable, and deletes both afterwards.
func benchTopic(b *testing.B) string {
	c := newCleaner(b)
	topic := unique("bench")
	relaytest.Provision(b, openSub(b, c, unique("g")), topic)
	return topic
}

func benchRelayPublish(b *testing.B, batch int) {
	topic := benchTopic(b)
	pub := openPub(b)
	msgs := benchMessages(batch)
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	relaytest.PublishReused(b, pub, topic, msgs, b.N)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}

func benchRawPublish(b *testing.B, batch int) {
	topic := benchTopic(b)
	ch := rawChannel(b)
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, batch))
	returns := ch.NotifyReturn(make(chan amqp091.Return, batch))
	body := make([]byte, benchPayload)
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		for range n {
			err := ch.Publish(topic, "", true, false, amqp091.Publishing{
				MessageId: relay.NewID(), DeliveryMode: amqp091.Persistent, Body: body,
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		for range n {
			select {
			case c := <-confirms:
				if !c.Ack {
					b.Fatal("nack")
				}
			case r := <-returns:
				b.Fatalf("returned: %s", r.ReplyText)
			}
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}

func BenchmarkConsumeAck(b *testing.B) {
	for _, window := range []int{64, 512} {
		b.Run(fmt.Sprintf("relay/inflight=%d", window), func(b *testing.B) { benchRelayConsume(b, window) })
		b.Run(fmt.Sprintf("raw/prefetch=%d", window), func(b *testing.B) { benchRawConsume(b, window) })
	}
}

// fillQueue provisions topic's queue for group and publishes n messages
// into it with the raw client.
func fillQueue(b *testing.B, c *cleaner, group string, n int) string {
	topic := unique("bench")
	relaytest.Provision(b, openSub(b, c, group), topic)
	ch := rawChannel(b)
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1000))
	body := make([]byte, benchPayload)
	for done := 0; done < n; done += 1000 {
		k := min(1000, n-done)
		for range k {
			if err := ch.Publish(topic, "", false, false, amqp091.Publishing{
				MessageId: relay.NewID(), DeliveryMode: amqp091.Persistent, Body: body,
			}); err != nil {
				b.Fatal(err)
			}
		}
		for range k {
			<-confirms
		}
	}
	return topic
}

func benchRelayConsume(b *testing.B, window int) {
	c := newCleaner(b)
	group := unique("g")
	topic := fillQueue(b, c, group, b.N)
	sub := openSub(b, c, group, "inflight", fmt.Sprint(window))
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	ch, cancel := relaytest.Subscribe(b, sub, topic)
	for i := 0; i < b.N; i++ {
		m, ok := <-ch
		if !ok {
			b.Fatal("channel closed")
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
	b.StopTimer()
	cancel()
}

func benchRawConsume(b *testing.B, window int) {
	c := newCleaner(b)
	group := unique("g")
	topic := fillQueue(b, c, group, b.N)
	ch := rawChannel(b)
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if err := ch.Qos(window, 0, false); err != nil {
		b.Fatal(err)
	}
	dels, err := ch.Consume(topic+"."+group, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		d, ok := <-dels
		if !ok {
			b.Fatal("deliveries closed")
		}
		if err := d.Ack(false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
	b.StopTimer()
	_ = ch.Close()
}

// BenchmarkRatio runs relay and the raw client alternately, five rounds of
// b.N messages each (the order flips every round), and reports the median
// rate of each and their ratio, so that a busy machine affects both sides
// alike. Run it with a fixed count, e.g. -benchtime 20000x.
func BenchmarkRatio(b *testing.B) {
	const rounds = 5
	compare := func(b *testing.B, relayRate, rawRate func(b *testing.B, n int) float64) {
		relaytest.CompareRates(b, rounds, relayRate, rawRate)
	}
	b.Run("publish/batch=100", func(b *testing.B) {
		compare(b,
			func(b *testing.B, n int) float64 { return relayPublishRate(b, n, 100) },
			func(b *testing.B, n int) float64 { return rawPublishRate(b, n, 100) })
	})
	b.Run("publish/goroutines=64,batch=1", func(b *testing.B) {
		compare(b,
			func(b *testing.B, n int) float64 { return relayConcurrentRate(b, n, 64) },
			func(b *testing.B, n int) float64 { return rawConcurrentRate(b, n, 64) })
	})
	for _, window := range []int{64, 512} {
		b.Run(fmt.Sprintf("consume-ack/window=%d", window), func(b *testing.B) {
			compare(b,
				func(b *testing.B, n int) float64 { return relayConsumeRate(b, n, window) },
				func(b *testing.B, n int) float64 { return rawConsumeRate(b, n, window) })
		})
	}
}

func relayPublishRate(b *testing.B, n, batch int) float64 {
	topic := benchTopic(b)
	pub := openPub(b)
	msgs := benchMessages(batch)
	start := time.Now()
	relaytest.PublishReused(b, pub, topic, msgs, n)
	return float64(n) / time.Since(start).Seconds()
}

func rawPublishRate(b *testing.B, n, batch int) float64 {
	topic := benchTopic(b)
	ch := rawChannel(b)
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, batch))
	returns := ch.NotifyReturn(make(chan amqp091.Return, batch))
	body := make([]byte, benchPayload)
	start := time.Now()
	for done := 0; done < n; done += batch {
		k := min(batch, n-done)
		for range k {
			if err := ch.Publish(topic, "", true, false, amqp091.Publishing{
				MessageId: relay.NewID(), DeliveryMode: amqp091.Persistent, Body: body,
			}); err != nil {
				b.Fatal(err)
			}
		}
		for range k {
			select {
			case c := <-confirms:
				if !c.Ack {
					b.Fatal("nack")
				}
			case r := <-returns:
				b.Fatalf("returned: %s", r.ReplyText)
			}
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

func relayConsumeRate(b *testing.B, n, window int) float64 {
	return relayConsumeRateWith(b, n, "inflight", fmt.Sprint(window))
}

// relayConsumeRateWith is relayConsumeRate with the subscriber URL's
// parameters besides group=.
func relayConsumeRateWith(b *testing.B, n int, params ...string) float64 {
	c := newCleaner(b)
	group := unique("g")
	topic := fillQueue(b, c, group, n)
	sub := openSub(b, c, group, params...)
	return relaytest.AckLoopRate(b, sub, topic, n, nil)
}

func rawConsumeRate(b *testing.B, n, window int) float64 { return rawConsumeAcking(b, n, window, 1) }

// rawConsumeAcking is amqp091-go's consume of n messages with a prefetch
// of window: each delivery acked alone (ackEvery 1), or one multiple ack
// per ackEvery deliveries.
func rawConsumeAcking(b *testing.B, n, window, ackEvery int) float64 {
	c := newCleaner(b)
	group := unique("g")
	topic := fillQueue(b, c, group, n)
	ch := rawChannel(b)
	defer ch.Close()
	start := time.Now()
	if err := ch.Qos(window, 0, false); err != nil {
		b.Fatal(err)
	}
	dels, err := ch.Consume(topic+"."+group, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		d, ok := <-dels
		if !ok {
			b.Fatal("deliveries closed")
		}
		if len(d.Body) != benchPayload {
			b.Fatal("bad payload")
		}
		if i%ackEvery == 0 || i == n {
			if err := d.Ack(ackEvery > 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// relayConcurrentRate publishes n single-message Publish calls from g
// goroutines (a service publishing per request).
func relayConcurrentRate(b *testing.B, n, g int) float64 {
	topic := benchTopic(b)
	pub := openPub(b)
	body := make([]byte, benchPayload)
	start := time.Now()
	runConcurrent(b, n, g, func() error {
		return pub.Publish(context.Background(), topic, &relay.Message{ID: relay.NewID(), Payload: body})
	})
	return float64(n) / time.Since(start).Seconds()
}

// rawConcurrentRate does the same on one shared channel in confirm mode,
// each goroutine waiting for its own deferred confirmation.
func rawConcurrentRate(b *testing.B, n, g int) float64 {
	topic := benchTopic(b)
	ch := rawChannel(b)
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	body := make([]byte, benchPayload)
	start := time.Now()
	runConcurrent(b, n, g, func() error {
		dc, err := ch.PublishWithDeferredConfirm(topic, "", true, false, amqp091.Publishing{
			MessageId: relay.NewID(), DeliveryMode: amqp091.Persistent, Body: body,
		})
		if err != nil {
			return err
		}
		if !dc.Wait() {
			return fmt.Errorf("nack")
		}
		return nil
	})
	select {
	case r := <-returns:
		b.Fatalf("returned: %s", r.ReplyText)
	default:
	}
	return float64(n) / time.Since(start).Seconds()
}

func runConcurrent(b *testing.B, n, g int, publish func() error) {
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	errs := make(chan error, g)
	done := make(chan struct{})
	for range g {
		go func() {
			defer func() { done <- struct{}{} }()
			for range work {
				if err := publish(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range g {
		<-done
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

func BenchmarkDelayLateness(b *testing.B) {
	c := newCleaner(b)
	base := brokerURL(b)
	drivertest.BenchmarkDelayLateness(b, drivertest.Harness{
		NewTopic: func(testing.TB) string {
			topic := unique("bench-delay")
			c.topic(topic)
			return topic
		},
		PublisherURL: base,
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			s := relaytest.OpenSubscriber(t, testenv.WithParams(base, "group", group))
			return &trackedSub{Subscriber: s.(*amqp.Subscriber), c: c, group: group}
		},
	})
}

// BenchmarkLatency measures one message in flight (publish, receive, ack,
// repeat) through relay and through amqp091-go doing the same work (a
// persistent, mandatory publish on a channel in confirm mode, waited for;
// the delivery from a consumer with manual acks; its Ack), idle and under
// a steady load of 2,000 msg/s on another topic:
//
//	go test -run '^$' -bench Latency -benchtime 2000x ./adapters/amqp/
func BenchmarkLatency(b *testing.B) {
	c := newCleaner(b)
	h := drivertest.Harness{
		NewTopic: func(testing.TB) string {
			topic := unique("bench-latency")
			c.topic(topic)
			return topic
		},
		NewPublisher:  func(t testing.TB) relay.Publisher { return openPub(t) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return openSub(t, c, group) },
	}
	raw := func(b *testing.B, topic string) (drivertest.RoundTrip, func()) {
		group := unique("g")
		relaytest.Provision(b, openSub(b, c, group), topic) // relay's topology: exchange topic, queue topic.group
		pch := rawChannel(b)
		if err := pch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		returns := pch.NotifyReturn(make(chan amqp091.Return, 1))
		cch := rawChannel(b)
		if err := cch.Qos(benchLatencyPrefetch, 0, false); err != nil {
			b.Fatal(err)
		}
		dels, err := cch.Consume(topic+"."+group, "", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		body := make([]byte, 100)
		rt := func(ctx context.Context) error {
			id := relay.NewID()
			dc, err := pch.PublishWithDeferredConfirm(topic, "", true, false, amqp091.Publishing{
				MessageId: id, DeliveryMode: amqp091.Persistent, Body: body,
			})
			if err != nil {
				return err
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				return fmt.Errorf("confirm: ack %v, %v", ok, err)
			}
			select {
			case r := <-returns:
				return fmt.Errorf("returned: %s", r.ReplyText)
			case d, ok := <-dels:
				if !ok {
					return fmt.Errorf("deliveries closed")
				}
				if d.MessageId != id {
					return fmt.Errorf("received %s, want %s", d.MessageId, id)
				}
				return d.Ack(false)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return rt, func() {}
	}
	drivertest.BenchmarkLatency(b, h, raw, drivertest.LatencyOptions{})
}

// benchLatencyPrefetch is the raw consumer's prefetch, relay's default
// in-flight window.
const benchLatencyPrefetch = 64
