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
// Publish calls of batch messages from one goroutine (each message made in
// the timed loop, as an application makes them), and returns the rate in
// msg/s: relay's side of an adapter's publish ratio.
func PublishRate(b testing.TB, pub relay.Publisher, topic string, n, batch int, payload []byte) float64 {
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
func ConsumeRate(b testing.TB, sub relay.Subscriber, topic string, n int) float64 {
	b.Helper()
	return float64(n) / ConsumeSettled(b, sub, topic, n).Seconds()
}

// ConsumeSettled is ConsumeRate returning the time from the Subscribe call
// until the channel closed; sub stays open.
func ConsumeSettled(b testing.TB, sub relay.Subscriber, topic string, n int) time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	ch := subscribeOrFail(b, ctx, sub, topic)
	ackN(b, ch, n, nil)
	cancel()
	for range ch { // closed once every ack is at the broker
	}
	return time.Since(start)
}

// AckLoopRate is ConsumeRate without the wait for the acks to reach the
// broker: the rate of the receive-and-ack loop, from the Subscribe call
// to the last Ack call, checking each message with check when not nil.
// It closes sub afterwards.
func AckLoopRate(b testing.TB, sub relay.Subscriber, topic string, n int, check func(*relay.Message) error) float64 {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	ackN(b, subscribeOrFail(b, ctx, sub, topic), n, check)
	rate := float64(n) / time.Since(start).Seconds()
	_ = sub.Close()
	return rate
}

func subscribeOrFail(b testing.TB, ctx context.Context, sub relay.Subscriber, topic string) <-chan *relay.Message {
	b.Helper()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	return ch
}

// ackN receives and acks n messages of ch, checking each with check when
// not nil.
func ackN(b testing.TB, ch <-chan *relay.Message, n int, check func(*relay.Message) error) {
	b.Helper()
	for range n {
		m, ok := <-ch
		if !ok {
			b.Fatal("channel closed")
		}
		if check != nil {
			if err := check(m); err != nil {
				b.Fatal(err)
			}
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
}

// PublishReused publishes n messages in Publish calls of len(msgs)
// messages, reusing msgs with a fresh ID for each call (a benchmark's
// publish loop without an allocation per message).
func PublishReused(b testing.TB, pub relay.Publisher, topic string, msgs []*relay.Message, n int) {
	b.Helper()
	ctx := context.Background()
	batch := len(msgs)
	for done := 0; done < n; done += batch {
		k := min(batch, n-done)
		for _, m := range msgs[:k] {
			m.ID = relay.NewID()
		}
		if err := pub.Publish(ctx, topic, msgs[:k]...); err != nil {
			b.Fatal(err)
		}
	}
}

// RatioSide is one side of a ratio benchmark: it runs n messages' worth
// of the work and returns the rate in messages per second.
type RatioSide func(b *testing.B, n int) float64

// The sizes of PublishConsumeRatio's benchmarks.
const (
	RatioBatch   = 100 // messages per Publish call
	RatioWindow  = 256 // the consumer's window
	RatioPayload = 100 // bytes per message
)

// PublishConsumeRatio runs an adapter's two ratio benchmarks, each with
// CompareRates over five rounds: "publish/batch=100" (relayPub against
// rawPub) and "consume-ack/window=256" (relayCon against rawCon). The
// sides publish RatioPayload-byte payloads in batches of RatioBatch and
// consume with a window of RatioWindow.
func PublishConsumeRatio(b *testing.B, relayPub, rawPub, relayCon, rawCon RatioSide) {
	const rounds = 5
	b.Run("publish/batch=100", func(b *testing.B) { CompareRates(b, rounds, relayPub, rawPub) })
	b.Run("consume-ack/window=256", func(b *testing.B) { CompareRates(b, rounds, relayCon, rawCon) })
}

// DefaultsRatio runs an adapter's benchmarks at the settings a user gets
// without tuning, each with CompareRates over five rounds: "publish"
// (relayPub, publishing RatioPayload-byte payloads in batches of
// RatioBatch, against rawPub) and "consume-ack" (relayCon, a subscriber
// opened without inflight=, against rawCon). The raw sides are the
// fastest loop a competent user writes with the client library (batched
// reads, acks pipelined with the next read), not the same work as relay's
// tuned ratio benchmarks.
func DefaultsRatio(b *testing.B, relayPub, rawPub, relayCon, rawCon RatioSide) {
	const rounds = 5
	b.Run("publish", func(b *testing.B) { CompareRates(b, rounds, relayPub, rawPub) })
	b.Run("consume-ack", func(b *testing.B) { CompareRates(b, rounds, relayCon, rawCon) })
}
