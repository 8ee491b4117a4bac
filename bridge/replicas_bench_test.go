package bridge_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
	relaynats "github.com/go-relay/relay/adapters/nats"
	_ "github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/router"
)

// replicaCounts are the group sizes BenchmarkReplicas measures.
var replicaCounts = []int{1, 2, 3, 8}

// replicaPayload is the payload size of BenchmarkReplicas' messages.
const replicaPayload = 1024

// replicaMessages is the backlog BenchmarkReplicas drains: 50,000, or
// RELAY_BENCH_REPLICA_MESSAGES.
func replicaMessages(b *testing.B) int {
	if s := os.Getenv("RELAY_BENCH_REPLICA_MESSAGES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 {
			b.Fatalf("RELAY_BENCH_REPLICA_MESSAGES=%q: want a count of at least 100", s)
		}
		return n
	}
	return 50000
}

// replicaSource is a backend a group drains in BenchmarkReplicas.
type replicaSource struct {
	name   string
	pubURL string
	subURL func(group string) string // group is ignored where the queue is the group
	drop   func(topic, group string)
}

// replicaSources are every cross-process backend: Redis, RabbitMQ, Kafka
// (kfake, 4 partitions), SQS (goaws), PostgreSQL (a schema of its own)
// and NATS JetStream, with their URLs as they are, plus group=.
func replicaSources(b *testing.B) []replicaSource {
	holdBrokers(b)
	redis, amqp, nats, pg := testenv.Redis(b), testenv.AMQP(b), testenv.NATS(b), testenv.Postgres(b)
	sqsOnce.Do(func() { sqsSvc = testenv.StartSQS() })
	sqsSvc.Need(b)
	sqsu := sqsURL(sqsSvc, "")
	k := kafkaURL(b)
	rr, ra, rk, rs := newRawRedis(b, redis), newRawAMQP(b, amqp), newRawKafka(b, k), &rawSQS{sqsSvc}
	pgURL, pgDrop := pgSchema(b, pg)
	return []replicaSource{
		{"redis", redis, withGroup(redis), func(t, g string) { rr.drop(t, g) }},
		{"amqp", amqp, withGroup(amqp), func(t, g string) { ra.drop(t, g) }},
		{"kafka", k, withGroup(k), func(t, g string) { rk.drop(t, g) }},
		{"sqs", sqsu, func(string) string { return sqsu }, func(t, g string) { rs.drop(t, g) }},
		{"postgres", pgURL, withGroup(pgURL), func(string, string) { pgDrop() }},
		{"nats", nats, withGroup(nats), func(t, _ string) { natsDrop(nats, t) }},
	}
}

// pgSchema returns the URL of a schema of its own on base, and a function
// that empties it (drops it; the next Provision creates it again).
func pgSchema(b *testing.B, base string) (string, func()) {
	schema := "relay_bench_replicas_" + relay.NewID()[24:]
	u, err := url.Parse(base)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	drop := func() {
		pool, err := pgxpool.New(context.Background(), base)
		if err != nil {
			return
		}
		defer pool.Close()
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
	b.Cleanup(drop)
	return u.String(), drop
}

func natsDrop(server, topic string) {
	nc, err := natsgo.Connect(server)
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	_ = js.DeleteStream(context.Background(), relaynats.StreamName(topic))
}

// BenchmarkReplicas measures how a group scales out on each backend: 1, 2,
// 3 and 8 members of one group drain a backlog of 50,000 × 1 KiB messages
// with default settings (no tuning), as an operator who adds replicas
// would run them:
//
//   - bridge: N `relay bridge` processes on one config, one route with
//     the default settings, forwarding to Redis (a cheap destination).
//     The processes are started and ready, then stopped (SIGSTOP) while
//     the backlog is published, then continued together: the clock runs
//     from SIGCONT until the destination holds the backlog, so that
//     starting N processes on this machine's cores is not counted.
//   - router: N routers in this process, each with a subscriber of its
//     own (its own connection), the default settings and a handler that
//     returns at once; the handlers wait for a gate until the group stopped
//     growing (joins, rebalances), and the clock runs from the gate to
//     the last message handled.
//
// It reports the median over the rounds (b.N) of the drain time for each
// N (nN-s), its ratio to one member (nN/n1), the forwarding rate of 1, 2 and 3 bridge replicas (nN-msg/s)
// and the largest peak RSS and Go heap in use of one bridge replica
// (bridge-rss-MiB, bridge-heap-MiB; the window's byte bound is
// inflight_bytes, 64 MiB by default). Run it with:
//
//	go test -run '^$' -bench BenchmarkReplicas -benchtime 1x -timeout 60m ./bridge
func BenchmarkReplicas(b *testing.B) {
	srcs := replicaSources(b)
	bin := relayBinary(b)
	sink := testenv.Redis(b)
	for _, src := range srcs {
		b.Run(src.name+"/bridge", func(b *testing.B) { benchBridgeReplicas(b, bin, src, sink) })
		b.Run(src.name+"/router", func(b *testing.B) { benchRouterReplicas(b, src) })
	}
}

func benchBridgeReplicas(b *testing.B, bin string, src replicaSource, sink string) {
	n := replicaMessages(b)
	rs := newRawRedis(b, sink)
	secs := map[int][]float64{}
	var rss, heap, dups float64
	for round := range b.N {
		for _, members := range replicaCounts {
			r := runBridgeReplicas(b, bin, src, sink, rs, members, n)
			secs[members] = append(secs[members], r.elapsed.Seconds())
			rss, heap = max(rss, r.peakRSS), max(heap, r.heap)
			dups += float64(r.duplicates)
			b.Logf("round %d: %d bridge replicas: %v (%.0f msg/s), forwarded %v, peak RSS %.0f MiB, heap %.0f MiB",
				round+1, members, r.elapsed.Round(time.Millisecond), float64(n)/r.elapsed.Seconds(), r.forwarded, r.peakRSS, r.heap)
		}
	}
	med := reportReplicas(b, secs)
	for _, members := range []int{1, 2, 3} {
		b.ReportMetric(float64(n)/med[members], fmt.Sprintf("n%d-msg/s", members))
	}
	b.ReportMetric(rss, "bridge-rss-MiB")
	b.ReportMetric(heap, "bridge-heap-MiB")
	b.ReportMetric(dups, "duplicates")
}

// reportReplicas reports the median drain time of each group size over
// the rounds, and its ratio to one member's; it returns the medians.
func reportReplicas(b *testing.B, secs map[int][]float64) map[int]float64 {
	med := map[int]float64{}
	for _, members := range replicaCounts {
		s := slices.Sorted(slices.Values(secs[members]))
		med[members] = s[len(s)/2]
		if len(s)%2 == 0 {
			med[members] = (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
	}
	for _, members := range replicaCounts {
		b.ReportMetric(med[members], fmt.Sprintf("n%d-s", members))
		if members > 1 {
			b.ReportMetric(med[members]/med[1], fmt.Sprintf("n%d/n1", members))
		}
	}
	return med
}

type replicaRun struct {
	elapsed    time.Duration
	forwarded  []float64 // per replica
	peakRSS    float64   // MiB, the largest replica's
	heap       float64   // MiB, the largest replica's heap in use at the end
	duplicates int64     // messages the destination got beyond the backlog
}

// runBridgeReplicas drains a backlog of n messages from src to Redis with
// members bridge processes.
func runBridgeReplicas(b *testing.B, bin string, src replicaSource, sink string, rs *rawRedis, members, n int) replicaRun {
	run := benchID()
	in, out, group := "bench-rin-"+run, "bench-rout-"+run, "bridge"
	defer src.drop(in, group)
	defer rs.drop(out)
	provisionTopic(b, src.subURL(group), in)
	cfg := fmt.Sprintf("routes:\n  - name: r\n    from:\n      url: %q\n      topic: %s\n    to:\n      url: %q\n      topic: %s\n",
		src.subURL(group), in, sink, out)
	file := filepath.Join(b.TempDir(), "bridge.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	procs := make([]*benchProc, members)
	for i := range procs {
		procs[i] = startBenchBridge(b, bin, file)
	}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for _, p := range procs {
		p.waitReady(b)
	}
	// Let a group that rebalances (Kafka) settle before the backlog.
	time.Sleep(time.Second)
	for _, p := range procs {
		p.signal(syscall.SIGSTOP)
	}
	fillN(b, src.pubURL, in, n)
	ctx := context.Background()
	start := time.Now()
	for _, p := range procs {
		p.signal(syscall.SIGCONT)
	}
	deadline := start.Add(10 * time.Minute)
	for {
		l, err := rs.c.XLen(ctx, out).Result()
		if err != nil {
			b.Fatal(err)
		}
		if l >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d forwarded by %d replicas", l, n, members)
		}
		time.Sleep(2 * time.Millisecond)
	}
	r := replicaRun{elapsed: time.Since(start)}
	// The counters trail the destination by the acks in flight.
	for wait := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.forwarded, r.heap = r.forwarded[:0], 0
		var sum float64
		for _, p := range procs {
			m := p.metrics(b)
			f := m[`relay_bridge_forwarded_total{route="r"}`]
			r.forwarded = append(r.forwarded, f)
			sum += f
			r.heap = max(r.heap, m["go_memstats_heap_inuse_bytes"]/(1<<20))
		}
		if sum >= float64(n) || time.Now().After(wait) {
			break
		}
	}
	for _, p := range procs {
		r.peakRSS = max(r.peakRSS, p.peakRSS())
		p.stop()
	}
	l, err := rs.c.XLen(ctx, out).Result()
	if err != nil {
		b.Fatal(err)
	}
	r.duplicates = l - int64(n)
	return r
}

// provisionTopic creates topic and the group of subURL.
func provisionTopic(b *testing.B, subURL, topic string) {
	sub, err := relay.OpenSubscriber(context.Background(), subURL)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(context.Background(), topic); err != nil {
			b.Fatal(err)
		}
	}
}

// fillN publishes n messages of replicaPayload bytes to topic, from 4
// goroutines in batches of 100.
func fillN(b *testing.B, pubURL, topic string, n int) {
	pub, err := relay.OpenPublisher(context.Background(), pubURL)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	payload := make([]byte, replicaPayload)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(100)) - 100
				if i >= n {
					return
				}
				batch := make([]*relay.Message, min(100, n-i))
				for j := range batch {
					batch[j] = relay.NewMessage(payload)
				}
				if err := pub.Publish(context.Background(), topic, batch...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// benchRouterReplicas drains a backlog with 1, 2, 3 and 8 routers.
func benchRouterReplicas(b *testing.B, src replicaSource) {
	n := replicaMessages(b)
	secs := map[int][]float64{}
	var redelivered int64
	for round := range b.N {
		for _, members := range replicaCounts {
			d, again := runRouterReplicas(b, src, members, n)
			secs[members] = append(secs[members], d.Seconds())
			redelivered += again
			b.Logf("round %d: %d routers: %v (%.0f msg/s), %d redelivered", round+1, members, d.Round(time.Millisecond), float64(n)/d.Seconds(), again)
		}
	}
	reportReplicas(b, secs)
	b.ReportMetric(float64(redelivered), "redelivered")
}

// runRouterReplicas drains a backlog of n messages of src with members
// routers, each with a subscriber of its own. It returns the time from
// the gate to the last message handled, and how many deliveries were
// redeliveries (Attempt > 1).
func runRouterReplicas(b *testing.B, src replicaSource, members, n int) (time.Duration, int64) {
	run := benchID()
	in, group := "bench-rr-"+run, "router"
	defer src.drop(in, group)
	provisionTopic(b, src.subURL(group), in)
	fillN(b, src.pubURL, in, n)

	gate := make(chan struct{})
	done := make(chan struct{})
	var entered, again atomic.Int64
	var mu sync.Mutex
	seen := make(map[string]struct{}, n)
	h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		entered.Add(1)
		if m.Attempt() > 1 {
			again.Add(1)
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		mu.Lock()
		seen[m.ID] = struct{}{}
		if len(seen) == n {
			close(done)
		}
		mu.Unlock()
		return nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range members {
		sub, err := relay.OpenSubscriber(context.Background(), src.subURL(group))
		if err != nil {
			b.Fatal(err)
		}
		r, err := router.New(router.Config{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		r.Own(sub)
		if err := r.AddHandler("h", sub, in, h); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = r.Run(ctx)
		}()
	}
	// The group has settled when no handler was entered for a second
	// (every member that has messages holds one at the gate).
	last, since := entered.Load(), time.Now()
	for limit := time.Now().Add(30 * time.Second); time.Since(since) < time.Second && time.Now().Before(limit); time.Sleep(20 * time.Millisecond) {
		if e := entered.Load(); e != last {
			last, since = e, time.Now()
		}
	}
	start := time.Now()
	close(gate)
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		b.Fatalf("%d of %d handled by %d routers", len(seen), n, members)
	}
	return time.Since(start), again.Load()
}

// --- relay bridge processes ---

var (
	relayBinOnce sync.Once
	relayBinPath string
	relayBinErr  error
)

// relayBinary builds cmd/relay once per test binary.
func relayBinary(b *testing.B) string {
	relayBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "relay-bench-")
		if err != nil {
			relayBinErr = err
			return
		}
		relayBinPath = filepath.Join(dir, "relay")
		out, err := exec.Command("go", "build", "-o", relayBinPath, "../cmd/relay").CombinedOutput()
		if err != nil {
			relayBinErr = fmt.Errorf("building relay: %v\n%s", err, out)
		}
	})
	if relayBinErr != nil {
		b.Fatal(relayBinErr)
	}
	return relayBinPath
}

// benchProc is a `relay bridge` process.
type benchProc struct {
	cmd  *exec.Cmd
	addr chan string // the HTTP address, once logged
	url  string
	done chan struct{}
}

var benchAddrRE = regexp.MustCompile(`serving /healthz, /readyz, /metrics.* address=(\S+)`)

func startBenchBridge(b *testing.B, bin, file string) *benchProc {
	p := &benchProc{addr: make(chan string, 1), done: make(chan struct{})}
	p.cmd = exec.Command(bin, "bridge", "-c", file, "--http", "127.0.0.1:0")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if m := benchAddrRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case p.addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

func (p *benchProc) waitReady(b *testing.B) {
	deadline := time.After(60 * time.Second)
	select {
	case a := <-p.addr:
		p.url = "http://" + a
	case <-p.done:
		b.Fatal("relay bridge exited before it served HTTP")
	case <-deadline:
		b.Fatal("relay bridge did not serve HTTP within 60s")
	}
	for {
		resp, err := http.Get(p.url + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			b.Fatal("relay bridge exited before it was ready")
		case <-deadline:
			b.Fatal("relay bridge not ready within 60s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *benchProc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// stop ends the process: SIGTERM, then SIGKILL after 30s. Idempotent.
func (p *benchProc) stop() {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// metrics reads the process's /metrics: value by sample name (with labels).
func (p *benchProc) metrics(b *testing.B) map[string]float64 {
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// peakRSS is the process's peak resident set (VmHWM) in MiB.
func (p *benchProc) peakRSS() float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
