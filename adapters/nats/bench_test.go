package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
	relaynats "github.com/go-relay/relay/adapters/nats"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkRatio compares relay with nats.go's jetstream package doing
// the same work on the same server in the same run
// (relaytest.PublishConsumeRatio): the raw side publishes asynchronously
// with the message ID in Nats-Msg-Id and awaits each batch's acks before
// the next, and consumes with a durable pull consumer (Fetch(256) and an
// Ack per message). Use a fixed count, e.g. -benchtime 20000x.
func BenchmarkRatio(b *testing.B) {
	relaytest.PublishConsumeRatio(b, relayPublishRate, rawPublishRate, relayConsumeRate, rawConsumeRate)
}

// benchStream creates topic's stream as the adapter would and deletes it
// when the round ends.
func benchStream(b *testing.B, js jetstream.JetStream, topic string) func() {
	ctx := context.Background()
	name := relaynats.StreamName(topic)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{topic}, Duplicates: relaynats.DefaultDuplicateWindow}); err != nil {
		b.Fatal(err)
	}
	return func() { _ = js.DeleteStream(ctx, name) }
}

func relayPublishRate(b *testing.B, n int) float64 {
	_, js := rawJS(b)
	topic := newName("bench.pub.")
	defer benchStream(b, js, topic)()
	return relaytest.PublishRate(b, openPub(b), topic, n, relaytest.RatioBatch, make([]byte, relaytest.RatioPayload))
}

func rawPublishRate(b *testing.B, n int) float64 {
	_, js := rawJS(b)
	topic := newName("bench.pub.")
	defer benchStream(b, js, topic)()
	payload := make([]byte, 100)
	futures := make([]jetstream.PubAckFuture, relaytest.RatioBatch)
	start := time.Now()
	for done := 0; done < n; done += relaytest.RatioBatch {
		k := min(relaytest.RatioBatch, n-done)
		for j := range k {
			msg := &natsgo.Msg{Subject: topic, Data: payload, Header: natsgo.Header{jetstream.MsgIDHeader: {relay.NewID()}}}
			f, err := js.PublishMsgAsync(msg)
			if err != nil {
				b.Fatal(err)
			}
			futures[j] = f
		}
		for _, f := range futures[:k] {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// fill publishes n messages to topic outside the timed part, waiting for
// the acks of every 1000 (nats.go fails an async publish that has to wait
// over 200 ms for one of its 4000 slots, which a loaded machine reaches).
func fill(b *testing.B, js jetstream.JetStream, topic string, n int) {
	payload := make([]byte, 100)
	for i := 0; i < n; i++ {
		msg := &natsgo.Msg{Subject: topic, Data: payload, Header: natsgo.Header{jetstream.MsgIDHeader: {relay.NewID()}}}
		if _, err := js.PublishMsgAsync(msg); err != nil {
			b.Fatal(err)
		}
		if (i+1)%1000 == 0 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("filling the stream: no publish ack for a minute")
			}
		}
	}
}

func relayConsumeRate(b *testing.B, n int) float64 {
	_, js := rawJS(b)
	topic := newName("bench.consume.")
	defer benchStream(b, js, topic)()
	sub := openSub(b, newName("g"), "inflight", fmt.Sprint(relaytest.RatioWindow))
	relaytest.Provision(b, sub.(relay.Provisioner), topic)
	fill(b, js, topic, n)
	return relaytest.AckLoopRate(b, sub, topic, n, func(m *relay.Message) error {
		if len(m.Payload) != 100 {
			return fmt.Errorf("payload of %d bytes, want 100", len(m.Payload))
		}
		return nil
	})
}

func rawConsumeRate(b *testing.B, n int) float64 { return rawFetchRate(b, n, relaytest.RatioWindow) }

// rawFetchRate is nats.go's consume of n messages: Fetch of up to batch
// messages at a time, each acked (an ack does not wait for the server).
func rawFetchRate(b *testing.B, n, batch int) float64 {
	ctx := context.Background()
	_, js := rawJS(b)
	topic := newName("bench.consume.")
	defer benchStream(b, js, topic)()
	c, err := js.CreateConsumer(ctx, relaynats.StreamName(topic), jetstream.ConsumerConfig{
		Durable: newName("g"), AckPolicy: jetstream.AckExplicitPolicy, AckWait: relaynats.DefaultAckWait,
	})
	if err != nil {
		b.Fatal(err)
	}
	fill(b, js, topic, n)
	start := time.Now()
	for got := 0; got < n; {
		fetched, err := c.Fetch(min(batch, n-got), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for m := range fetched.Messages() {
			if len(m.Data()) != 100 {
				b.Fatal("bad payload")
			}
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
			got++
		}
		if err := fetched.Error(); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkLatency measures one message in flight (publish, receive, ack,
// repeat) through relay and through nats.go's jetstream package doing the
// same work (a synchronous publish with Nats-Msg-Id, waiting for its
// PubAck; Fetch(1) on a durable pull consumer with explicit acks; Ack,
// which like relay's does not wait for the server), idle and under a
// steady load of 2,000 msg/s on another stream:
//
//	go test -run '^$' -bench Latency -benchtime 2000x ./adapters/nats/
func BenchmarkLatency(b *testing.B) {
	server := natsURL(b)
	h := drivertest.Harness{
		NewTopic: func(testing.TB) string {
			topic := newName("bench.latency.")
			b.Cleanup(func() { deleteStreamOf(server, topic) })
			return topic
		},
		NewPublisher:  func(t testing.TB) relay.Publisher { return openPub(t) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber { return openSub(t, group) },
	}
	raw := func(b *testing.B, topic string) (drivertest.RoundTrip, func()) {
		ctx := context.Background()
		_, js := rawJS(b)
		drop := benchStream(b, js, topic)
		c, err := js.CreateConsumer(ctx, relaynats.StreamName(topic), jetstream.ConsumerConfig{
			Durable: newName("g"), AckPolicy: jetstream.AckExplicitPolicy, AckWait: relaynats.DefaultAckWait,
		})
		if err != nil {
			b.Fatal(err)
		}
		payload := make([]byte, 100)
		rt := func(ctx context.Context) error {
			id := relay.NewID()
			msg := &natsgo.Msg{Subject: topic, Data: payload, Header: natsgo.Header{jetstream.MsgIDHeader: {id}}}
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				return err
			}
			batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				return err
			}
			n := 0
			for m := range batch.Messages() {
				if got := m.Headers().Get(jetstream.MsgIDHeader); got != id {
					return fmt.Errorf("received %s, want %s", got, id)
				}
				if err := m.Ack(); err != nil {
					return err
				}
				n++
			}
			if err := batch.Error(); err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("fetched %d messages, want 1", n)
			}
			return nil
		}
		return rt, drop
	}
	drivertest.BenchmarkLatency(b, h, raw, drivertest.LatencyOptions{})
}
