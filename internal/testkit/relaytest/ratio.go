package relaytest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// Round is what one side of a ratio benchmark measured in one round.
type Round struct {
	Rate float64 // messages per second
	CPU  float64 // process CPU time per message in µs; 0 when not measured
}

// CompareRounds runs relay and raw (the client library doing the same
// work) alternately for rounds rounds of b.N messages each, relay first
// in even rounds and raw first in odd ones, so that load from elsewhere
// on the machine weighs on both sides alike. It reports the median rate
// of each side (relay-msg/s, raw-msg/s), the ratio of those medians
// (ratio), the median of each round's own relay ÷ raw (ratio-paired:
// the two sides of a round run back to back, so it moves less when the
// machine's speed drifts during the run), and, when the sides measure it,
// the median CPU per message of each (relay-cpu-µs/msg, raw-cpu-µs/msg).
// It logs every round's rates. Run it with a fixed count, e.g.
// -benchtime 20000x.
func CompareRounds(b *testing.B, rounds int, relay, raw func(n int) Round) {
	b.Helper()
	rel, rw := make([]Round, 0, rounds), make([]Round, 0, rounds)
	for r := range rounds {
		if r%2 == 0 {
			rel = append(rel, relay(b.N))
			rw = append(rw, raw(b.N))
		} else {
			rw = append(rw, raw(b.N))
			rel = append(rel, relay(b.N))
		}
	}
	rate := func(r Round) float64 { return r.Rate }
	cpu := func(r Round) float64 { return r.CPU }
	relRates, rawRates := field(rel, rate), field(rw, rate)
	paired := make([]float64, rounds)
	for r := range paired {
		paired[r] = relRates[r] / rawRates[r]
	}
	mRel, mRaw := median(relRates), median(rawRates)
	b.ReportMetric(mRel, "relay-msg/s")
	b.ReportMetric(mRaw, "raw-msg/s")
	b.ReportMetric(mRel/mRaw, "ratio")
	b.ReportMetric(median(paired), "ratio-paired")
	if relCPU, rawCPU := median(field(rel, cpu)), median(field(rw, cpu)); relCPU > 0 || rawCPU > 0 {
		b.ReportMetric(relCPU, "relay-cpu-µs/msg")
		b.ReportMetric(rawCPU, "raw-cpu-µs/msg")
	}
	b.Logf("rounds: relay %.0f, raw %.0f msg/s", relRates, rawRates)
}

// CompareRates is CompareRounds for sides that measure their rate only.
func CompareRates(b *testing.B, rounds int, relay, raw func(b *testing.B, n int) float64) {
	b.Helper()
	CompareRounds(b, rounds,
		func(n int) Round { return Round{Rate: relay(b, n)} },
		func(n int) Round { return Round{Rate: raw(b, n)} })
}

func field(rs []Round, f func(Round) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// median is the middle value of xs (the upper one of an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// PublishRate publishes n messages of payload to topic with pub, in
// Publish calls of batch messages from one goroutine, and returns the
// rate in msg/s: relay's side of an adapter's publish ratio.
func PublishRate(b *testing.B, pub relay.Publisher, topic string, n, batch int, payload []byte) float64 {
	b.Helper()
	msgs := make([]*relay.Message, batch)
	start := time.Now()
	for done := 0; done < n; done += batch {
		k := min(batch, n-done)
		for j := range msgs[:k] {
			msgs[j] = relay.NewMessage(payload)
		}
		if err := pub.Publish(context.Background(), topic, msgs[:k]...); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// ConsumeRate subscribes sub to topic, receives and acks n messages, ends
// the subscription and waits for its channel to close (every ack is at
// the broker then), and returns the rate in msg/s from Subscribe on:
// relay's side of an adapter's consume ratio.
func ConsumeRate(b *testing.B, sub relay.Subscriber, topic string, n int) float64 {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	for range n {
		if err := (<-ch).Ack(); err != nil {
			b.Fatal(err)
		}
	}
	cancel()
	for range ch {
	}
	return float64(n) / time.Since(start).Seconds()
}
