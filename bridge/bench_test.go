package bridge_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/gcppubsub"
	_ "github.com/go-relay/relay/adapters/kafka"
	_ "github.com/go-relay/relay/adapters/mqtt"
	_ "github.com/go-relay/relay/adapters/redisstream"
	_ "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// benchPayload is the payload size of the benchmarks' messages.
const benchPayload = 512

// benchMessages is how many messages each measurement moves: set per pair
// by BenchmarkRoute (routeMessages), 20,000 for the other benchmarks.
var benchMessages = 20000

// routeMessages is how many messages BenchmarkRoute moves per measurement
// of a pair: 200,000, so that a measurement lasts long enough at these
// brokers' rates for start-up (group joins, the first fetches, the
// pipeline filling) not to weigh on it; 20,000 where an end is SQS on an
// HTTP emulator, which moves a few thousand a second, or Pub/Sub on
// pstest, whose every Pull scans the subscription's whole backlog.
// RELAY_BENCH_ROUTE_MESSAGES overrides both.
func routeMessages(b *testing.B, from, to benchBackend) int {
	if s := os.Getenv("RELAY_BENCH_ROUTE_MESSAGES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 {
			b.Fatalf("RELAY_BENCH_ROUTE_MESSAGES=%q: want a count of at least 100", s)
		}
		return n
	}
	if from.name == "sqs" || to.name == "sqs" || from.name == "gcppubsub" || to.name == "gcppubsub" {
		return 20000
	}
	return 200000
}

type benchBackend struct {
	name   string
	pubURL string
	subURL func(group string) string
	// raw is the backend's client library used directly (rawbench_test.go).
	raw rawBackend
}

var (
	sqsOnce sync.Once
	sqsSvc  *testenv.SQSService
)

// holdBrokers holds off restarts of the shared local Redis and RabbitMQ by
// other packages' tests while the benchmark runs (see testenv.HoldBroker).
func holdBrokers(b *testing.B) {
	testenv.HoldBroker(b, "redis")
	testenv.HoldBroker(b, "amqp")
}

func benchBackends(b *testing.B) []benchBackend {
	holdBrokers(b)
	redis, amqp := testenv.Redis(b), testenv.AMQP(b)
	sqsOnce.Do(func() { sqsSvc = testenv.StartSQS() })
	sqsSvc.Need(b)
	sqsu := sqsURL(sqsSvc, "")
	return []benchBackend{
		{"redis", redis, withGroup(redis), newRawRedis(b, redis)},
		{"amqp", amqp, withGroup(amqp), newRawAMQP(b, amqp)},
		kafkaBackend(b),
		{"sqs", sqsu, func(string) string { return testenv.WithParams(sqsu, "wait", "1") }, &rawSQS{sqsSvc}},
		sqliteBackend(b),
		gcpBackend(b),
		mqttBackend(b),
	}
}

// withGroup returns the subscriber URLs of u: u with group=g.
func withGroup(u string) func(string) string {
	return func(g string) string { return testenv.WithParams(u, "group", g) }
}

// kafkaBackend is a kfake cluster for the benchmark (or the real one of
// RELAY_TEST_KAFKA_BROKERS; see kafkaURL).
func kafkaBackend(b *testing.B) benchBackend {
	k := kafkaURL(b)
	return benchBackend{"kafka", k, withGroup(k), newRawKafka(b, k)}
}

// BenchmarkRoute measures, per ordered pair of backends (and kafka ->
// kafka, one cluster) in interleaved rounds of the same run:
//
//   - raw-consume: the source's client library consuming and acking a
//     backlog that relay published, with the bridge's in-flight window
//     (bridge.DefaultSourceWindow; see rawbench_test.go for each loop);
//   - raw-publish: the destination's client library publishing in
//     batches of 100 from 4 goroutines;
//   - consume: relay consuming and acking a backlog on the source with
//     the bridge's window;
//   - publish-batch: relay publishing to the destination in batches of
//     100 from 4 goroutines;
//   - publish-single: one message per Publish call from 16 goroutines;
//   - forward: the bridge forwarding a backlog from source to destination
//     with the default route settings;
//   - raw-forward, on kafka -> kafka only: a franz-go loop forwarding the
//     same backlog (rawKafka.forward), which shows what forwarding costs
//     without relay where both ends share this machine's cores.
//
// It reports each rate in msg/s (the mean over the rounds) and the ratios
// of forwarding to the slower end: ratio-raw to the slower of raw-consume
// and raw-publish, ratio to the slower of relay's consume and
// publish-batch, ratio-single to the slower of consume and
// publish-single; consume/raw and publish/raw are relay's ends against
// the raw ones; forward/raw-forward the bridge against the franz-go loop. For an SQS end it also reports the HTTP calls per message
// of the forward run (src-, dst-http-calls/msg, counted by a reverse
// proxy in front of the service, one per end) and of the raw loops
// (raw-consume-, raw-publish-calls/msg). Each measurement moves
// routeMessages messages. Run it with:
//
//	go test -run '^$' -bench BenchmarkRoute -benchtime 1x -timeout 60m ./bridge
func BenchmarkRoute(b *testing.B) {
	bs := benchBackends(b)
	for _, from := range bs {
		for _, to := range bs {
			if from.name == to.name && from.name != "kafka" {
				continue
			}
			b.Run(from.name+"-to-"+to.name, func(b *testing.B) {
				defer func(n int) { benchMessages = n }(benchMessages)
				benchMessages = routeMessages(b, from, to)
				var rawConsume, rawPublish, consume, bulk, single, fwd float64
				var rawConsumeCalls, rawPublishCalls, srcCalls, dstCalls int64
				var rawConsumeBusy, rawPublishBusy, fwdBusy time.Duration
				// Between two Kafka ends, a franz-go forwarding loop too
				// (rawKafka.forward): what forwarding costs on this machine
				// without relay, where both ends share its cores.
				rawForwards := from.name == "kafka" && to.name == "kafka"
				var rawFwd float64
				for round := range b.N {
					rc := measureRawConsume(b, from)
					rp := measureRawPublish(b, to)
					c := measureConsume(b, from)
					pb := measurePublish(b, to, 100, 4)
					ps := measurePublish(b, to, 1, 16)
					fc := measureForwardCounted(b, from, to)
					if rawForwards {
						rf := measureRawForward(b, from, to)
						rawFwd += rf.rate
						b.Logf("round %d: raw forward %.0f msg/s", round+1, rf.rate)
					}
					rawConsume, rawPublish, consume, bulk, single, fwd = rawConsume+rc.rate, rawPublish+rp.rate, consume+c, bulk+pb, single+ps, fwd+fc.rate
					rawConsumeCalls += rc.calls
					rawPublishCalls += rp.calls
					rawConsumeBusy, rawPublishBusy, fwdBusy = rawConsumeBusy+rc.busy, rawPublishBusy+rp.busy, fwdBusy+fc.busy
					b.Logf("round %d: raw consume %.0f, raw publish %.0f, consume %.0f, publish-batch %.0f, publish-single %.0f, forward %.0f msg/s",
						round+1, rc.rate, rp.rate, c, pb, ps, fc.rate)
					if fc.src != nil {
						srcCalls += fc.src.total()
						b.Logf("round %d: forward source calls: %v", round+1, fc.src)
					}
					if fc.dst != nil {
						dstCalls += fc.dst.total()
						b.Logf("round %d: forward destination calls: %v", round+1, fc.dst)
					}
				}
				n := float64(b.N)
				rawConsume, rawPublish = rawConsume/n, rawPublish/n
				consume, bulk, single, fwd = consume/n, bulk/n, single/n, fwd/n
				b.ReportMetric(rawConsume, "raw-consume-msg/s")
				b.ReportMetric(rawPublish, "raw-publish-msg/s")
				b.ReportMetric(consume, "consume-msg/s")
				b.ReportMetric(bulk, "publish-batch-msg/s")
				b.ReportMetric(single, "publish-single-msg/s")
				b.ReportMetric(fwd, "forward-msg/s")
				b.ReportMetric(fwd/min(rawConsume, rawPublish), "ratio-raw")
				b.ReportMetric(fwd/min(consume, bulk), "ratio")
				b.ReportMetric(fwd/min(consume, single), "ratio-single")
				b.ReportMetric(consume/rawConsume, "consume/raw")
				b.ReportMetric(bulk/rawPublish, "publish/raw")
				if rawForwards {
					b.ReportMetric(rawFwd/n, "raw-forward-msg/s")
					b.ReportMetric(fwd/(rawFwd/n), "forward/raw-forward")
				}
				// What the machine can do at all: forwarding costs at least
				// the CPU of consuming plus that of publishing, on cores
				// that the brokers, the raw ends and the bridge share here.
				if rawConsumeBusy+rawPublishBusy > 0 {
					all := b.N * benchMessages
					rcCPU, rpCPU, fwdCPU := perMessage(rawConsumeBusy, all), perMessage(rawPublishBusy, all), perMessage(fwdBusy, all)
					ceiling := float64(runtime.NumCPU()) * 1e6 / (rcCPU + rpCPU)
					b.ReportMetric(rcCPU, "raw-consume-cpu-µs/msg")
					b.ReportMetric(rpCPU, "raw-publish-cpu-µs/msg")
					b.ReportMetric(fwdCPU, "forward-cpu-µs/msg")
					b.ReportMetric(ceiling, "cpu-ceiling-msg/s")
					b.ReportMetric(fwd/min(rawConsume, rawPublish, ceiling), "ratio-ceiling")
				}
				msgs := n * float64(benchMessages)
				if from.name == "sqs" {
					b.ReportMetric(float64(srcCalls)/msgs, "src-http-calls/msg")
					b.ReportMetric(float64(rawConsumeCalls)/msgs, "raw-consume-calls/msg")
				}
				if to.name == "sqs" {
					b.ReportMetric(float64(dstCalls)/msgs, "dst-http-calls/msg")
					b.ReportMetric(float64(rawPublishCalls)/msgs, "raw-publish-calls/msg")
				}
				if from.name == "sqs" || to.name == "sqs" {
					b.ReportMetric(float64(srcCalls+dstCalls)/msgs, "http-calls/msg")
				}
			})
		}
	}
}

func benchID() string { return relay.NewID()[24:] }

// fill publishes benchMessages messages to topic in batches.
func fill(b *testing.B, be benchBackend, topic string) {
	b.Helper()
	pub, err := relay.OpenPublisher(context.Background(), be.pubURL)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	payload := make([]byte, benchPayload)
	for i := 0; i < benchMessages; i += 100 {
		batch := make([]*relay.Message, 100)
		for j := range batch {
			batch[j] = relay.NewMessage(payload)
		}
		if err := pub.Publish(context.Background(), topic, batch...); err != nil {
			b.Fatal(err)
		}
	}
}

func provisioned(b *testing.B, be benchBackend, topic, group string) relay.Subscriber {
	b.Helper()
	sub, err := relay.OpenSubscriber(context.Background(), be.subURL(group))
	if err != nil {
		b.Fatal(err)
	}
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(context.Background(), topic); err != nil {
			b.Fatal(err)
		}
	}
	return sub
}

// measureConsume returns the rate of consuming and acking a backlog, with
// the in-flight window the bridge uses by default.
func measureConsume(b *testing.B, be benchBackend) float64 {
	topic := "bench-c-" + benchID()
	window := benchBackend{name: be.name, pubURL: be.pubURL, subURL: func(g string) string {
		return testenv.WithParams(be.subURL(g), "inflight", strconv.Itoa(bridge.DefaultSourceWindow(be.subURL(g))))
	}}
	defer be.raw.drop(topic, "g")
	sub := provisioned(b, window, topic, "g")
	defer sub.Close()
	fill(b, be, topic)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	// The clock starts at the first message, so that joining the group
	// (a Kafka rebalance) is not counted; the first message is not.
	var start time.Time
	for n := 0; n < benchMessages; n++ {
		// A message already waiting is taken without arming a timer: a
		// timer per message would cost relay's side of the comparison what
		// the raw loops do not pay.
		var m *relay.Message
		select {
		case m = <-ch:
		default:
			select {
			case m = <-ch:
			case <-time.After(time.Minute):
				b.Fatalf("consumed %d of %d", n, benchMessages)
			}
		}
		_ = m.Ack()
		if n == 0 {
			start = time.Now()
		}
	}
	return float64(benchMessages-1) / time.Since(start).Seconds()
}

// measurePublish returns the rate of publishing with batch messages per
// call from workers goroutines.
func measurePublish(b *testing.B, be benchBackend, batch, workers int) float64 {
	topic := "bench-p-" + benchID()
	defer be.raw.drop(topic, "g")
	sub := provisioned(b, be, topic, "g") // so that the messages are kept (and routable)
	defer sub.Close()
	pub, err := relay.OpenPublisher(context.Background(), be.pubURL)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	payload := make([]byte, benchPayload)
	return runParallel(b, batch, workers, func(n int) error {
		msgs := make([]*relay.Message, n)
		for j := range msgs {
			msgs[j] = relay.NewMessage(payload)
		}
		return pub.Publish(context.Background(), topic, msgs...)
	})
}

// BenchmarkRouteGuarantee measures, in one run, the same kafka -> kafka
// route (kfake, 4 partitions; default route settings) forwarding a backlog
// at-most-once, at-least-once and exactly-once (a transactional_id on the
// source), one after the other in each of b.N interleaved rounds, so that
// the machine's load falls on the three alike. It reports each rate in
// msg/s (the mean over the rounds) and the ratios of at-most-once and
// exactly-once to at-least-once. Run it with:
//
//	go test -run '^$' -bench BenchmarkRouteGuarantee -benchtime 3x ./bridge
func BenchmarkRouteGuarantee(b *testing.B) {
	k := kafkaBackend(b)
	gs := []relay.Guarantee{relay.AtMostOnce, relay.AtLeastOnce, relay.ExactlyOnce}
	rates := make([]float64, len(gs))
	for round := range b.N {
		for i, g := range gs {
			r := measureForward(b, k, k, g)
			b.Logf("round %d: %v %.0f msg/s", round+1, g, r)
			rates[i] += r / float64(b.N)
		}
	}
	amo, alo, eo := rates[0], rates[1], rates[2]
	b.ReportMetric(amo, "at-most-once-msg/s")
	b.ReportMetric(alo, "at-least-once-msg/s")
	b.ReportMetric(eo, "exactly-once-msg/s")
	b.ReportMetric(amo/alo, "ratio-at-most-once")
	b.ReportMetric(eo/alo, "ratio-exactly-once")
}

// measureForward returns the rate at which a bridge forwards a backlog on
// a route with guarantee g and the default settings otherwise. For
// relay.ExactlyOnce, from and to must be one Kafka cluster; the source
// gets a transactional_id.
func measureForward(b *testing.B, from, to benchBackend, g relay.Guarantee) float64 {
	rate, _ := runForward(b, from, to, g, from.subURL("bridge"), to.pubURL, nil)
	return rate
}

// BenchmarkRouteSourcePositions measures what source_positions costs: a
// kafka -> kafka route (one kfake cluster) and a redis -> redis route
// forwarding a backlog with the option off and on, in interleaved rounds,
// reporting each rate, the machine's busy CPU per message, and the ratios
// on/off. Run it with:
//
//	go test -run '^$' -bench BenchmarkRouteSourcePositions -benchtime 3x -timeout 30m ./bridge
func BenchmarkRouteSourcePositions(b *testing.B) {
	holdBrokers(b)
	redis := testenv.Redis(b)
	for _, be := range []benchBackend{kafkaBackend(b), {"redis", redis, withGroup(redis), newRawRedis(b, redis)}} {
		b.Run(be.name, func(b *testing.B) {
			defer func(n int) { benchMessages = n }(benchMessages)
			benchMessages = routeMessages(b, be, be)
			var rate, cpu [2]float64
			for round := range b.N {
				for i, on := range []bool{false, true} {
					r, busy := runForward(b, be, be, relay.AtLeastOnce, be.subURL("bridge"), be.pubURL,
						func(rt *bridge.Route) { rt.SourcePositions = on })
					rate[i] += r / float64(b.N)
					cpu[i] += perMessage(busy, benchMessages) / float64(b.N)
					b.Logf("round %d: source_positions %v: %.0f msg/s, %.2f cpu-µs/msg", round+1, on, r, perMessage(busy, benchMessages))
				}
			}
			b.ReportMetric(rate[0], "off-msg/s")
			b.ReportMetric(rate[1], "on-msg/s")
			b.ReportMetric(rate[1]/rate[0], "ratio-on/off")
			b.ReportMetric(cpu[0], "off-cpu-µs/msg")
			b.ReportMetric(cpu[1], "on-cpu-µs/msg")
		})
	}
}

// runForward is measureForward with the bridge's source and destination
// opened at srcURL and dstURL (from's and to's, or the same through a
// proxy); provisioning and filling use from and to. Beside the rate it
// returns the machine's busy CPU time from the first message forwarded to
// the last, the span of the rate (see machineBusy).
func runForward(b *testing.B, from, to benchBackend, g relay.Guarantee, srcURL, dstURL string, edit func(*bridge.Route)) (float64, time.Duration) {
	run := benchID()
	in, out := "bench-in-"+run, "bench-out-"+run
	defer from.raw.drop(in, "bridge")
	defer to.raw.drop(out, "reader")
	src := provisioned(b, from, in, "bridge")
	_ = src.Close()
	dst := provisioned(b, to, out, "reader")
	defer dst.Close()
	fill(b, from, in)
	reg := prometheus.NewRegistry()
	if g == relay.ExactlyOnce {
		srcURL = testenv.WithParams(srcURL, "transactional_id", "bench-"+run)
	}
	rt := bridge.Route{
		Name:      "bench",
		From:      bridge.Source{URL: srcURL, Topic: in},
		To:        bridge.Destination{URL: dstURL, Topic: out},
		Guarantee: g,
	}
	if edit != nil {
		edit(&rt)
	}
	br, err := bridge.New(bridge.Config{HTTP: bridge.HTTPConfig{Disabled: true}, Routes: []bridge.Route{rt}}, bridge.Options{Logger: quiet, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	var busy time.Duration // machineBusy at the first message forwarded
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	// As for consume, the clock starts when the first message was
	// forwarded, so connecting and joining the group are not counted.
	deadline := time.Now().Add(5 * time.Minute)
	var start time.Time
	var first float64
	for {
		n := forwarded(b, reg)
		if n > 0 && start.IsZero() {
			start, first, busy = time.Now(), n, machineBusy()
		}
		if n >= float64(benchMessages) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("forwarded %v of %d", n, benchMessages)
		}
		time.Sleep(time.Millisecond)
	}
	rate := (float64(benchMessages) - first) / time.Since(start).Seconds()
	busy = machineBusy() - busy
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return rate, busy
}

func forwarded(b *testing.B, reg *prometheus.Registry) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "relay_bridge_forwarded_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
