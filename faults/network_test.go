//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The network rows: each backend is reached through a fault proxy
// (testenv.FaultProxy, toxiproxy as a library) that slows, resets or
// black-holes its connections while a known set of IDs is published and
// consumed. The shared brokers are only ever reached through the proxy;
// nothing about them is changed.

const (
	// netLatency ± netJitter is added to every chunk in each direction.
	netLatency, netJitter = 500 * time.Millisecond, 250 * time.Millisecond
	// netBandwidth is the limit of the bandwidth phase, KB/s per direction.
	netBandwidth = 32
	// netResetRounds is how many times the reset scenario breaks every
	// connection (reset_peer and cut alternately); netResetFor is how long
	// each fault lasts.
	netResetRounds, netResetFor = 4, time.Second
	// blackHole is how long the black-hole scenario drops everything.
	blackHole = 30 * time.Second
	// holePublishTimeout bounds each Publish attempt during the black hole.
	holePublishTimeout = 2 * time.Second
	// holeWindow is the bridge's source window in its black-hole
	// scenario, smaller than what is published during the hole.
	holeWindow = 100
)

// netTarget is one backend behind a fault proxy.
type netTarget struct {
	adapter string
	pub     string // publisher URL, through the proxy
	sub     string // subscriber URL (group included), through the proxy
	proxy   *testenv.FaultProxy
	// keepalive names the settings that bound how soon a dead connection
	// is noticed (the black-hole row's note).
	keepalive string
	// noDetect, when set, says why the subscriber's Health cannot be
	// expected to notice a black hole of blackHole: an open limit,
	// shown in the row instead of failing it (docs/reliability.md).
	noDetect string
}

// netBackend builds a fresh target for one scenario.
type netBackend func(t *testing.T) netTarget

func netRedis(t *testing.T) netTarget {
	testenv.HoldBroker(t, "redis") // another test process's restart would empty it
	u, p := testenv.ProxyURL(t, redisURL(t))
	return netTarget{adapter: "redisstream", pub: u, proxy: p,
		sub:       testenv.WithParams(u, "group", unique("g"), "inflight", "64"),
		keepalive: "read_timeout=3s (default)"}
}

func netAMQP(t *testing.T) netTarget {
	testenv.HoldBroker(t, "amqp")
	u, p := testenv.ProxyURL(t, amqpURL(t))
	u = testenv.WithParams(u, "heartbeat", "2s")
	return netTarget{adapter: "amqp", pub: u, proxy: p,
		sub:       testenv.WithParams(u, "group", unique("g"), "inflight", "64"),
		keepalive: "heartbeat=2s"}
}

func netPostgres(t *testing.T) netTarget {
	u, p := testenv.ProxyURL(t, pgURL(t))
	return netTarget{adapter: "postgres", pub: u, proxy: p,
		sub:       testenv.WithParams(u, "group", unique("g"), "inflight", "64", "ping_interval", "2s"),
		keepalive: "ping_interval=2s (the LISTEN connection's keepalive), connect_timeout=5s (default)"}
}

func netNATS(t *testing.T) netTarget {
	base := testenv.NATS(t)
	withNATSCleanup(t, base, "faults-net")
	u, p := testenv.ProxyURL(t, base)
	u = testenv.WithParams(u, "ping_interval", "2s", "ack_wait", "5s")
	return netTarget{adapter: "nats", pub: u, proxy: p,
		sub:       testenv.WithParams(u, "group", unique("g"), "inflight", "64"),
		keepalive: "ping_interval=2s, ack_wait=5s"}
}

// netMQTT is the shared mosquitto (its sessions live on after the row,
// each subscribed to a topic nobody publishes to again).
func netMQTT(t *testing.T) netTarget {
	u, p := testenv.ProxyURL(t, testenv.MQTT(t))
	u = testenv.WithParams(u, "keep_alive", "2s", "connect_timeout", "2s")
	return netTarget{adapter: "mqtt", pub: u, proxy: p,
		sub:       testenv.WithParams(u, "group", unique("g"), "inflight", "64"),
		keepalive: "keep_alive=2s (lost after 3s without an answer), connect_timeout=2s"}
}

// netKafka starts a kfake cluster of its own that advertises the proxy's
// address, so that every client connection (not only the bootstrap one)
// goes through the proxy.
func netKafka(t *testing.T) netTarget {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewFaultProxy(t, ln.Addr().String())
	proxyAddr, err := net.ResolveTCPAddr("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.ListenFn(func(string, string) (net.Listener, error) {
			return advertisedListener{Listener: ln, addr: proxyAddr}, nil
		}))
	if err != nil {
		_ = ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	u := "kafka://" + p.Addr()
	return netTarget{adapter: "kafka (kfake)", pub: u, proxy: p,
		sub:       testenv.WithParams(u, "group", unique("g"), "inflight", "64", "session_timeout", "6s"),
		keepalive: "request_timeout=10s (default)"}
}

// advertisedListener reports another address than its own: kfake
// advertises its listener's address to clients.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

var (
	netSQSOnce sync.Once
	netSQS     *testenv.SQSService
)

// netSQSService is one goaws for every network scenario, stopped by
// TestMain.
func netSQSService(t *testing.T) *testenv.SQSService {
	netSQSOnce.Do(func() { netSQS = testenv.StartSQS() })
	netSQS.Need(t)
	return netSQS
}

func netSQSTarget(t *testing.T) netTarget {
	svc := netSQSService(t)
	if !svc.Emulated {
		t.Skip("SKIP: the network scenarios proxy the goaws endpoint they start")
	}
	proxied, p := testenv.ProxyURL(t, svc.Endpoint)
	q := url.Values{}
	q.Set("region", svc.Region)
	q.Set("endpoint", proxied)
	q.Set("access_key_id", "test")
	q.Set("secret_key", "test")
	u := "sqs://?" + q.Encode()
	return netTarget{adapter: "sqs (goaws)", pub: u, proxy: p,
		sub:       testenv.WithParams(u, "inflight", "64", "visibility", "30", "wait", "5"),
		keepalive: "wait=5s, receive_timeout=15s (wait + 10s, the default)"}
}

var netBackends = []struct {
	name string
	open netBackend
}{
	{"Redis", netRedis}, {"RabbitMQ", netAMQP}, {"Postgres", netPostgres},
	{"NATS", netNATS}, {"Kafka", netKafka}, {"SQS", netSQSTarget}, {"MQTT", netMQTT},
}

// netStream is a subscription consuming into a ledger, with the
// publisher, for one scenario.
type netStream struct {
	t      *testing.T
	nt     netTarget
	topic  string
	l      *ledger
	pub    relay.Publisher
	sub    relay.Subscriber
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func openStream(t *testing.T, nt netTarget, prefix string) *netStream {
	s := &netStream{t: t, nt: nt, topic: unique(prefix), l: newLedger()}
	s.sub = openSub(t, nt.sub)
	provision(t, s.sub, s.topic)
	s.pub = openPub(t, nt.pub)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ch, err := s.sub.Subscribe(ctx, s.topic)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	consume(s.l, ch, &s.wg)
	return s
}

// finish waits for every sent ID (up to limit), stops consuming and
// returns the row.
func (s *netStream) finish(scenario, note string, limit time.Duration) Result {
	s.l.waitAll(limit)
	s.cancel()
	_ = s.sub.Close()
	s.wg.Wait()
	return s.l.result(s.t, scenario, s.nt.adapter, note)
}

// noLeaks checks, after every other cleanup of t (proxies, clients,
// clusters) ran, that t left no goroutine behind.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		// The goroutine waiting for goaws, started by the first SQS
		// scenario, lives until TestMain stops goaws.
		goaws := goleak.IgnoreAnyFunction("github.com/go-relay/relay/internal/testkit/testenv.(*SQSService).run.func1")
		if err := goleak.Find(append(testenv.ProxyGoroutines(), ignore, goaws)...); err != nil {
			t.Errorf("goroutines left behind: %v", err)
		}
	})
}

// TestNetworkSlow publishes and consumes through netLatency ± netJitter,
// then through a netBandwidth KB/s limit.
func TestNetworkSlow(t *testing.T) {
	for _, b := range netBackends {
		t.Run(b.name, func(t *testing.T) {
			noLeaks(t)
			start := time.Now()
			nt := b.open(t)
			s := openStream(t, nt, "faults-net-slow")
			nt.proxy.Latency(netLatency, netJitter)
			phase := time.Now()
			failures := publishAll(t, s.l, s.pub, s.topic, batchOf(50, 64, "latency"), 10, nil)
			s.l.waitAll(2 * time.Minute)
			slow := time.Since(phase)
			nt.proxy.Restore()
			nt.proxy.Bandwidth(netBandwidth)
			phase = time.Now()
			failures += publishAll(t, s.l, s.pub, s.topic, batchOf(50, 1024, "bandwidth"), 10, nil)
			r := s.finish("slow network", fmt.Sprintf("50 × 64 B through %v ± %v latency each way (all delivered in %.1fs), then 50 × 1 KiB through %d KB/s (%.1fs); %d Publish calls failed and were retried",
				netLatency, netJitter, slow.Seconds(), netBandwidth, time.Since(phase).Seconds(), failures), 2*time.Minute)
			nt.proxy.Restore()
			record(t, r, start)
		})
	}
}

// TestNetworkResets breaks every connection netResetRounds times while
// messages are published and consumed: reset_peer (a TCP RST on the next
// data) and a cut (every connection closed and new ones refused)
// alternately, each for netResetFor, waiting for a delivery after each.
func TestNetworkResets(t *testing.T) {
	const total = 300
	for _, b := range netBackends {
		t.Run(b.name, func(t *testing.T) {
			noLeaks(t)
			start := time.Now()
			nt := b.open(t)
			s := openStream(t, nt, "faults-net-reset")
			var published atomic.Int64
			pubDone := make(chan int)
			go func() {
				pubDone <- publishAll(t, s.l, s.pub, s.topic, batchOf(total, 64, "reset"), 5, func(done int) {
					published.Store(int64(done))
					time.Sleep(5 * time.Millisecond) // keep the stream going through the faults
				})
			}()
			var recoverMax time.Duration
			for round := 0; round < netResetRounds; round++ {
				waitFor(t, "publishing to go on", 2*time.Minute, func() bool { return published.Load() > int64(round*total/(netResetRounds+1)) })
				if round%2 == 0 {
					nt.proxy.ResetPeer(0)
				} else {
					nt.proxy.Cut()
				}
				time.Sleep(netResetFor) // the fault's duration, not a wait for a condition
				nt.proxy.Restore()
				nt.proxy.Uncut()
				healed := time.Now()
				_, before, _, _ := s.l.counts()
				waitFor(t, "a delivery after the fault", 2*time.Minute, func() bool { _, n, _, _ := s.l.counts(); return n > before || published.Load() == total })
				recoverMax = max(recoverMax, time.Since(healed))
			}
			failures := <-pubDone
			r := s.finish("connection resets", fmt.Sprintf("%d rounds (reset_peer and cut alternately, %v each) while publishing and consuming; %d Publish calls failed and were retried",
				netResetRounds, netResetFor, failures), 2*time.Minute)
			r.RecoverSeconds = seconds(recoverMax)
			record(t, r, start)
		})
	}
}

// TestNetworkBlackHole drops everything for blackHole, connections kept
// open: a Publish during the hole returns its context's error, the
// subscriber's Health turns unhealthy, and once the network is back the
// clients recover by themselves and every ID arrives.
func TestNetworkBlackHole(t *testing.T) {
	for _, b := range netBackends {
		t.Run(b.name, func(t *testing.T) {
			noLeaks(t)
			start := time.Now()
			nt := b.open(t)
			s := openStream(t, nt, "faults-net-hole")
			publishAll(t, s.l, s.pub, s.topic, batchOf(50, 64, "before"), 10, nil)
			s.l.waitAll(time.Minute)
			if _, _, lost, _ := s.l.counts(); lost > 0 {
				t.Fatalf("%d messages not delivered before the fault", lost)
			}

			nt.proxy.Hang()
			holeStart := time.Now()
			// One batch published into the hole, each attempt bounded by
			// holePublishTimeout, retried until the network is back.
			during := batchOf(10, 64, "during")
			s.l.expect(during)
			var firstErr, otherErr error // the first error, the first not of the ctx
			attempts := 0
			pubDone := make(chan struct{})
			go func() {
				defer close(pubDone)
				for {
					ctx, cancel := context.WithTimeout(context.Background(), holePublishTimeout)
					err := s.pub.Publish(ctx, s.topic, during...)
					cancel()
					if err == nil {
						return
					}
					attempts++
					if firstErr == nil {
						firstErr = err
					}
					if otherErr == nil && !errors.Is(err, context.DeadlineExceeded) && time.Since(holeStart) < blackHole {
						otherErr = err
					}
					if time.Since(holeStart) > blackHole+2*time.Minute {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
			health := s.sub.(relay.HealthChecker)
			var detect time.Duration
			var unhealthy error
			for time.Since(holeStart) < blackHole {
				if err := health.Health(); err != nil {
					detect, unhealthy = time.Since(holeStart), err
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(time.Until(holeStart.Add(blackHole))) // the hole's duration
			nt.proxy.Restore()
			healed := time.Now()
			<-pubDone
			s.l.waitAll(2 * time.Minute)
			waitFor(t, "the subscriber to be healthy again", 2*time.Minute, func() bool { return health.Health() == nil })
			recovered := time.Since(healed)
			publishAll(t, s.l, s.pub, s.topic, batchOf(50, 64, "after"), 10, nil)

			r := s.finish("black hole", fmt.Sprintf("everything dropped for %v (connections kept open); %d Publish attempts of %v failed with the context's error; %s",
				blackHole, attempts, holePublishTimeout, nt.keepalive), 2*time.Minute)
			if unhealthy != nil {
				r.DetectSeconds = seconds(detect)
			}
			r.RecoverSeconds = seconds(recovered)
			switch {
			case firstErr == nil:
				t.Errorf("a Publish into the black hole succeeded")
			case otherErr != nil:
				t.Errorf("Publish into the black hole: want an error wrapping context.DeadlineExceeded, got %v", otherErr)
			}
			switch {
			case unhealthy == nil && nt.noDetect != "":
				r.Note += "; Health stayed nil through the hole (known limit: " + nt.noDetect + ")"
				t.Logf("KNOWN LIMIT: %s", nt.noDetect)
			case unhealthy == nil:
				t.Errorf("the subscriber's Health stayed nil through %v of black hole", blackHole)
			default:
				t.Logf("unhealthy after %v: %v", detect, unhealthy)
			}
			record(t, r, start)
		})
	}
}

// seconds is d rounded to 0.1 s, for Result's measured times.
func seconds(d time.Duration) *float64 {
	v := d.Round(100 * time.Millisecond).Seconds()
	return &v
}

// waitFor polls cond every 50 ms until it holds, failing t after limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not after %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNetworkBridgeBlackHole runs a bridge from Redis (reached directly)
// to RabbitMQ through a fault proxy, black-holes the destination for
// blackHole while the source keeps receiving, and reconciles at the
// destination: the bridge acks a source message only once the destination
// accepted it, so nothing is lost and forwarding resumes by itself.
func TestNetworkBridgeBlackHole(t *testing.T) {
	noLeaks(t)
	start := time.Now()
	testenv.HoldBroker(t, "redis")
	testenv.HoldBroker(t, "amqp")
	src := redisURL(t)
	dst, proxy := testenv.ProxyURL(t, amqpURL(t))
	dst = testenv.WithParams(dst, "heartbeat", "2s")
	in, out := unique("faults-net-bridge-in"), unique("faults-net-bridge-out")
	b, err := bridge.New(bridge.Config{HTTP: bridge.HTTPConfig{Disabled: true}, Routes: []bridge.Route{{
		Name:           "redis-to-amqp",
		From:           bridge.Source{URL: src, Topic: in, Group: unique("bridge"), InFlight: holeWindow},
		To:             bridge.Destination{URL: dst, Topic: out},
		PublishTimeout: holePublishTimeout,
	}}}, bridge.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	check := openSub(t, testenv.WithParams(amqpURL(t), "group", unique("check"), "inflight", "64"))
	provision(t, check, out)
	l := newLedger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := check.Subscribe(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	consume(l, ch, &wg)
	runErr := make(chan error, 1)
	go func() { runErr <- b.Run(ctx) }()
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	ready := func() bool {
		resp, err := srv.Client().Get(srv.URL + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	waitFor(t, "the bridge to be ready", time.Minute, ready)

	pub := openPub(t, src)
	publishAll(t, l, pub, in, batchOf(50, 64, "before"), 10, nil)
	l.waitAll(time.Minute)
	if _, _, lost, _ := l.counts(); lost > 0 {
		t.Fatalf("%d messages not forwarded before the fault", lost)
	}
	proxy.Hang()
	holeStart := time.Now()
	var detect time.Duration
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		// More than the source window (holeWindow), so that a bridge
		// reading ahead without bound would show it.
		publishAll(t, l, pub, in, batchOf(400, 64, "during"), 20, func(int) { time.Sleep(100 * time.Millisecond) })
	}()
	for time.Since(holeStart) < blackHole {
		if !ready() {
			detect = time.Since(holeStart)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	<-pubDone
	// What the bridge holds while its destination is silent stays within
	// the source's window.
	var peakInFlight, peakBytes int64
	for time.Now().Before(holeStart.Add(blackHole)) {
		for _, rs := range b.Status().Routes {
			peakInFlight, peakBytes = max(peakInFlight, rs.InFlight), max(peakBytes, rs.InFlightBytes)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if peakInFlight > holeWindow {
		t.Errorf("the bridge held %d messages in flight during the hole, over the source window of %d", peakInFlight, holeWindow)
	}
	proxy.Restore()
	healed := time.Now()
	l.waitAll(2 * time.Minute)
	recovered := time.Since(healed)
	publishAll(t, l, pub, in, batchOf(50, 64, "after"), 10, nil)
	l.waitAll(2 * time.Minute)
	cancel()
	if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("bridge Run: %v", err)
	}
	_ = check.Close()
	wg.Wait()
	r := l.result(t, "bridge: destination black hole", "redisstream → amqp", fmt.Sprintf(
		"destination dropped everything for %v while 400 messages reached the source; publish_timeout=%v, heartbeat=2s; detect = /readyz failing; in flight during the hole at most %d messages (%d B; window %d)",
		blackHole, holePublishTimeout, peakInFlight, peakBytes, holeWindow))
	if detect > 0 {
		r.DetectSeconds = seconds(detect)
	}
	r.RecoverSeconds = seconds(recovered)
	if detect == 0 {
		t.Errorf("the bridge's /readyz stayed OK through %v of destination black hole", blackHole)
	}
	record(t, r, start)
}
