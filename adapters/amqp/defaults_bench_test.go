package amqp_test

import (
	"testing"
	"time"

	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkDefaults compares relay at its defaults (a subscriber URL with
// a group and nothing else) with the fastest amqp091-go loop: publishing
// in confirm mode, 100 messages per batch of confirmations
// (rawPublishRate); consuming with a prefetch of rawBestPrefetch and one
// multiple ack per rawBestAckEvery deliveries. Use a fixed count:
//
//	go test -run '^$' -bench Defaults -benchtime 50000x ./adapters/amqp/
func BenchmarkDefaults(b *testing.B) {
	relaytest.DefaultsRatio(b,
		func(b *testing.B, n int) float64 { return relayPublishRate(b, n, relaytest.RatioBatch) },
		func(b *testing.B, n int) float64 { return rawPublishRate(b, n, relaytest.RatioBatch) },
		relayDefaultConsumeRate, rawBestConsumeRate)
}

func relayDefaultConsumeRate(b *testing.B, n int) float64 {
	c := newCleaner(b)
	group := unique("g")
	topic := fillQueue(b, c, group, n)
	sub := openSub(b, c, group)
	return relaytest.AckLoopRate(b, sub, topic, n, nil)
}

// The best raw loop's prefetch count and how many deliveries one
// multiple ack covers.
const (
	rawBestPrefetch = 1000
	rawBestAckEvery = 250
)

func rawBestConsumeRate(b *testing.B, n int) float64 {
	c := newCleaner(b)
	group := unique("g")
	topic := fillQueue(b, c, group, n)
	ch := rawChannel(b)
	defer ch.Close()
	start := time.Now()
	if err := ch.Qos(rawBestPrefetch, 0, false); err != nil {
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
		if i%rawBestAckEvery == 0 || i == n {
			if err := d.Ack(true); err != nil {
				b.Fatal(err)
			}
		}
	}
	return float64(n) / time.Since(start).Seconds()
}
