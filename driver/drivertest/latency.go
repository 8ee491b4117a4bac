package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// RoundTrip is one step of a one-in-flight loop: publish one message,
// receive it, settle it. It returns once the settlement call returned.
type RoundTrip func(ctx context.Context) error

// LatencyLoop sets up one contender's one-in-flight loop on topic
// (clients, topology, subscription), outside the timed part, and returns
// its round trip and the function that tears the loop down.
type LatencyLoop func(b *testing.B, topic string) (rt RoundTrip, stop func())

// LatencyOptions tune BenchmarkLatency. The zero value is the default.
type LatencyOptions struct {
	// Rounds is how many interleaved rounds each side's b.N round trips
	// are split into (the order flips every round). Default 100.
	Rounds int
	// LoadRate is the steady background load of the "load" sub-benchmark
	// in messages per second. Default 2000.
	LoadRate int
	// Payload is the size of every message. Default 100 bytes.
	Payload int
	// Warmup round trips per side before the timed part. Default 20.
	Warmup int
}

// latencyTimeout bounds one round trip: a limit for a broken run to end
// with a message, not a timing assertion.
const latencyTimeout = 30 * time.Second

// BenchmarkLatency measures the latency of one message in flight
// (publish one message, receive it, ack it, repeat) through relay, opened
// from h, and through raw, the broker's own client doing the same work,
// on fresh topics of the same broker in the same run. Each side makes
// b.N round trips (run it with a fixed count, e.g. -benchtime 2000x),
// split into interleaved rounds so that load from other processes weighs
// on both alike, and every round trip is recorded.
//
// Two sub-benchmarks: "idle", and "load", where a relay publisher and
// subscriber pair opened from h moves LoadRate messages per second on
// another topic for the whole of both sides' rounds (the same load for
// relay and raw). Each reports relay-p50-µs, relay-p99-µs, raw-p50-µs,
// raw-p99-µs and the differences delta-p50-µs and delta-p99-µs (relay −
// raw); "load" also load-msg/s, the rate its subscriber received.
func BenchmarkLatency(b *testing.B, h Harness, raw LatencyLoop, o LatencyOptions) {
	if h.NewTopic == nil {
		h.NewTopic = func(testing.TB) string { return "relay-bench-" + shortID() }
	}
	if h.NewGroup == nil {
		h.NewGroup = func(testing.TB) string { return "g-" + shortID() }
	}
	o.Rounds = cmpOr(o.Rounds, 100)
	o.LoadRate = cmpOr(o.LoadRate, 2000)
	o.Payload = cmpOr(o.Payload, 100)
	o.Warmup = cmpOr(o.Warmup, 20)
	ph := &phases{}
	rel := relayLatencyLoop(h, o.Payload, ph)
	b.Run("idle", func(b *testing.B) { latencyRounds(b, rel, raw, h, o, ph) })
	b.Run("load", func(b *testing.B) {
		ld := startLoad(b, h, o)
		latencyRounds(b, rel, raw, h, o, ph)
		got := ld.stop(b)
		b.ReportMetric(got, "load-msg/s")
	})
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// phases are the parts of relay's round trips: Publish returning, the
// message arriving after that, Ack returning.
type phases struct{ publish, receive, ack []time.Duration }

func (p *phases) reset() { p.publish, p.receive, p.ack = p.publish[:0], p.receive[:0], p.ack[:0] }

func latencyRounds(b *testing.B, rel, raw LatencyLoop, h Harness, o LatencyOptions, ph *phases) {
	relRT, relStop := rel(b, h.NewTopic(b))
	defer relStop()
	rawRT, rawStop := raw(b, h.NewTopic(b))
	defer rawStop()
	run := func(rt RoundTrip, n int, into []time.Duration, what string) []time.Duration {
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), latencyTimeout)
			start := time.Now()
			err := rt(ctx)
			d := time.Since(start)
			cancel()
			if err != nil {
				b.Fatalf("%s round trip %d: %v", what, i, err)
			}
			into = append(into, d)
		}
		return into
	}
	run(relRT, o.Warmup, nil, "relay warm-up")
	run(rawRT, o.Warmup, nil, "raw warm-up")
	ph.reset()
	relD := make([]time.Duration, 0, b.N)
	rawD := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for r := range o.Rounds {
		n := b.N/o.Rounds + btoi(r < b.N%o.Rounds)
		if r%2 == 0 {
			relD = run(relRT, n, relD, "relay")
			rawD = run(rawRT, n, rawD, "raw")
		} else {
			rawD = run(rawRT, n, rawD, "raw")
			relD = run(relRT, n, relD, "relay")
		}
	}
	b.StopTimer()
	if len(relD) == 0 || len(rawD) == 0 {
		return
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	rel50, rel99 := percentile(relD, 50), percentile(relD, 99)
	raw50, raw99 := percentile(rawD, 50), percentile(rawD, 99)
	b.ReportMetric(us(rel50), "relay-p50-µs")
	b.ReportMetric(us(rel99), "relay-p99-µs")
	b.ReportMetric(us(raw50), "raw-p50-µs")
	b.ReportMetric(us(raw99), "raw-p99-µs")
	b.ReportMetric(us(rel50-raw50), "delta-p50-µs")
	b.ReportMetric(us(rel99-raw99), "delta-p99-µs")
	dist := func(ds []time.Duration) string {
		return fmt.Sprintf("p50 %v p90 %v p95 %v p99 %v p99.9 %v max %v", rnd(percentile(ds, 50)), rnd(percentile(ds, 90)),
			rnd(percentile(ds, 95)), rnd(percentile(ds, 99)), rnd(percentileF(ds, 99.9)), rnd(ds[len(ds)-1]))
	}
	b.Logf("%d round trips each: relay %s", len(relD), dist(relD))
	b.Logf("%d round trips each: raw   %s", len(rawD), dist(rawD))
	if len(ph.ack) > 0 {
		b.Logf("relay's parts: publish %s", dist(ph.publish))
		b.Logf("relay's parts: receive %s", dist(ph.receive))
		b.Logf("relay's parts: ack     %s", dist(ph.ack))
	}
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// percentile is the p-th percentile (nearest rank) of ds, sorting ds.
func percentile(ds []time.Duration, p int) time.Duration { return percentileF(ds, float64(p)) }

func percentileF(ds []time.Duration, p float64) time.Duration {
	slices.Sort(ds)
	i := int(math.Ceil(float64(len(ds))*p/100)) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func rnd(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

// RelayLatencyLoop is relay's one-in-flight loop through h: a publisher
// and a subscriber of a fresh group on topic, provisioned and subscribed
// before the first round trip; each round trip publishes one message of
// payload bytes, receives it (failing on any other message) and acks it.
func RelayLatencyLoop(h Harness, payload int) LatencyLoop { return relayLatencyLoop(h, payload, nil) }

// relayLatencyLoop is RelayLatencyLoop recording the parts of each round
// trip in ph when it is not nil.
func relayLatencyLoop(h Harness, payload int, ph *phases) LatencyLoop {
	return func(b *testing.B, topic string) (RoundTrip, func()) {
		pub := h.NewPublisher(b)
		sub := h.NewSubscriber(b, h.NewGroup(b))
		if p, ok := sub.(relay.Provisioner); ok {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := p.Provision(ctx, topic)
			cancel()
			if err != nil {
				b.Fatalf("Provision(%q): %v", topic, err)
			}
		}
		sctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(sctx, topic)
		if err != nil {
			cancel()
			b.Fatalf("Subscribe(%q): %v", topic, err)
		}
		body := make([]byte, payload)
		rt := func(ctx context.Context) error {
			m := relay.NewMessage(body)
			t0 := time.Now()
			if err := pub.Publish(ctx, topic, m); err != nil {
				return fmt.Errorf("publishing: %w", err)
			}
			t1 := time.Now()
			select {
			case got, ok := <-ch:
				if !ok {
					return errors.New("subscription channel closed")
				}
				t2 := time.Now()
				if got.ID != m.ID {
					return fmt.Errorf("received %s, want %s (attempt %d)", got.ID, m.ID, got.Attempt())
				}
				err := got.Ack()
				if ph != nil {
					ph.publish = append(ph.publish, t1.Sub(t0))
					ph.receive = append(ph.receive, t2.Sub(t1))
					ph.ack = append(ph.ack, time.Since(t2))
				}
				return err
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w", m.ID, ctx.Err())
			}
		}
		stop := func() {
			cancel()
			_ = sub.Close()
			_ = pub.Close()
		}
		return rt, stop
	}
}

// load is the steady background traffic of BenchmarkLatency's "load"
// sub-benchmark.
type load struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	start    time.Time
	received atomic.Int64
	sent     atomic.Int64
	seen     map[string]bool // IDs received, touched by the receiving goroutine only
	again    atomic.Int64    // deliveries of an ID already received
	mu       sync.Mutex
	err      error
	pub, sub interface{ Close() error }
}

func (l *load) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
	l.cancel()
}

// startLoad publishes o.LoadRate messages per second to a fresh topic
// (every millisecond, the messages due by then in one Publish call) and
// receives and acks them with a subscriber of its own group.
func startLoad(b *testing.B, h Harness, o LatencyOptions) *load {
	topic := h.NewTopic(b)
	pub := h.NewPublisher(b)
	sub := h.NewSubscriber(b, h.NewGroup(b))
	if p, ok := sub.(relay.Provisioner); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.Provision(ctx, topic)
		cancel()
		if err != nil {
			b.Fatalf("load: Provision(%q): %v", topic, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, pub: pub, sub: sub, seen: map[string]bool{}}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		b.Fatalf("load: Subscribe(%q): %v", topic, err)
	}
	body := make([]byte, o.Payload)
	l.start = time.Now()
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		for m := range ch {
			l.received.Add(1)
			if l.seen[m.ID] {
				l.again.Add(1)
			}
			l.seen[m.ID] = true
			if err := m.Ack(); err != nil {
				l.fail(fmt.Errorf("load: acking: %w", err))
			}
		}
	}()
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		sent := 0
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				due := int(now.Sub(l.start).Seconds()*float64(o.LoadRate)) - sent
				if due <= 0 {
					continue
				}
				msgs := make([]*relay.Message, due)
				for i := range msgs {
					msgs[i] = relay.NewMessage(body)
				}
				if err := pub.Publish(ctx, topic, msgs...); err != nil {
					if ctx.Err() == nil {
						l.fail(fmt.Errorf("load: publishing: %w", err))
					}
					return
				}
				sent += due
				l.sent.Store(int64(sent))
			}
		}
	}()
	return l
}

// stop ends the load and returns the rate its subscriber received at. It
// logs what was sent and received and how many deliveries were repeats.
func (l *load) stop(b *testing.B) float64 {
	rate := float64(l.received.Load()) / time.Since(l.start).Seconds()
	b.Logf("load: %d messages sent, %d deliveries received, %d of them repeats, in %v",
		l.sent.Load(), l.received.Load(), l.again.Load(), time.Since(l.start).Round(time.Millisecond))
	l.cancel()
	l.wg.Wait()
	_ = l.sub.Close()
	_ = l.pub.Close()
	if l.err != nil {
		b.Fatal(l.err)
	}
	return rate
}
