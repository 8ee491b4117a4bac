package mqtt_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// BenchmarkRatio compares relay with paho doing the same work on the same
// mosquitto (one of the benchmark's own: max_queued_messages 0 so that a
// backlog is kept whole, max_inflight_messages 256 as the window) in the
// same run: 100-byte payloads published at QoS 1 in batches of 100 whose
// PUBACKs are awaited before the next batch (paho's payloads carry a
// relay ID besides, as relay's envelope does); a backlog of b.N consumed
// by a persistent session of a shared subscription and acked one by one
// from another goroutine than paho's (relay: inflight=256). It alternates
// the two in rounds and reports the median rate of each side and their
// ratio, so that load from other processes weighs on both alike. Use a
// fixed count:
//
//	go test -run '^$' -bench Ratio -benchtime 20000x ./adapters/mqtt/
func BenchmarkRatio(b *testing.B) {
	const rounds = 5
	broker := testenv.StartMosquitto(b, "max_queued_messages 0", fmt.Sprintf("max_inflight_messages %d", benchWindow))
	compare := func(b *testing.B, relayRate, rawRate func(b *testing.B, base string, n int) float64) {
		relaytest.CompareRates(b, rounds,
			func(b *testing.B, n int) float64 { return relayRate(b, broker.URL(), n) },
			func(b *testing.B, n int) float64 { return rawRate(b, broker.URL(), n) })
	}
	b.Run("publish/batch=100", func(b *testing.B) { compare(b, relayPublishRate, rawPublishRate) })
	b.Run("consume-ack/window=256", func(b *testing.B) { compare(b, relayConsumeRate, rawConsumeRate) })
}

const (
	benchBatch   = 100
	benchWindow  = 256
	benchPayload = 100
)

func relayPublishRate(b *testing.B, base string, n int) float64 {
	pub := openPub(b, base)
	topic := newName("bench/pub/")
	payload := make([]byte, benchPayload)
	batch := make([]*relay.Message, benchBatch)
	start := time.Now()
	for done := 0; done < n; done += benchBatch {
		k := min(benchBatch, n-done)
		for j := range batch[:k] {
			batch[j] = relay.NewMessage(payload)
		}
		if err := pub.Publish(context.Background(), topic, batch[:k]...); err != nil {
			b.Fatal(err)
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	_ = pub.Close()
	return rate
}

// rawPublisher is a connected paho client with a clean session.
func rawPublisher(b *testing.B, base string) paho.Client {
	c := rawClient(base, newName("raw-pub-"), true, nil)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("connecting: %v", tok.Error())
	}
	return c
}

// rawPublish publishes n payloads of benchPayload bytes after a relay ID
// at QoS 1, awaiting the PUBACKs of every batch.
func rawPublish(b *testing.B, c paho.Client, topic string, n int) {
	payload := make([]byte, benchPayload)
	toks := make([]paho.Token, benchBatch)
	for done := 0; done < n; done += benchBatch {
		k := min(benchBatch, n-done)
		for j := range k {
			toks[j] = c.Publish(topic, 1, false, append([]byte(relay.NewID()), payload...))
		}
		for _, tok := range toks[:k] {
			if tok.Wait(); tok.Error() != nil {
				b.Fatal(tok.Error())
			}
		}
	}
}

func rawPublishRate(b *testing.B, base string, n int) float64 {
	c := rawPublisher(b, base)
	defer c.Disconnect(100)
	start := time.Now()
	rawPublish(b, c, newName("bench/pub/"), n)
	return float64(n) / time.Since(start).Seconds()
}

func relayConsumeRate(b *testing.B, base string, n int) float64 {
	return relayConsumeRateWith(b, base, n, "inflight", fmt.Sprint(benchWindow))
}

// relayConsumeRateWith is relayConsumeRate with the subscriber URL's
// parameters besides group=.
func relayConsumeRateWith(b *testing.B, base string, n int, params ...string) float64 {
	ctx := context.Background()
	topic := newName("bench/consume/")
	sub := openSub(b, base, newName("g"), params...)
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		b.Fatal(err)
	}
	pub := openPub(b, base)
	payload := make([]byte, benchPayload)
	for done := 0; done < n; done += 1000 {
		batch := make([]*relay.Message, min(1000, n-done))
		for j := range batch {
			batch[j] = relay.NewMessage(payload)
		}
		if err := pub.Publish(ctx, topic, batch...); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(sctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	for range n {
		m, ok := <-ch
		if !ok {
			b.Fatal("channel closed")
		}
		if len(m.Payload) != benchPayload {
			b.Fatal("bad payload")
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	_ = sub.Close()
	return rate
}

func rawConsumeRate(b *testing.B, base string, n int) float64 {
	topic, group, id := newName("bench/consume/"), newName("g"), newName("raw-sub-")
	filter := "$share/" + group + "/" + topic
	msgs := make(chan paho.Message, benchWindow)
	session := func(handler paho.MessageHandler) paho.Client {
		c := rawClient(base, id, false, handler)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.Fatalf("connecting: %v", tok.Error())
		}
		if tok := c.Subscribe(filter, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.Fatalf("subscribing: %v", tok.Error())
		}
		return c
	}
	session(nil).Disconnect(100) // the session, as Provision makes it
	pub := rawPublisher(b, base)
	rawPublish(b, pub, topic, n)
	pub.Disconnect(100)
	start := time.Now()
	c := session(func(_ paho.Client, m paho.Message) { msgs <- m })
	for range n {
		m := <-msgs
		if len(m.Payload()) != 36+benchPayload {
			b.Fatal("bad payload")
		}
		m.Ack()
	}
	rate := float64(n) / time.Since(start).Seconds()
	c.Disconnect(100)
	return rate
}
