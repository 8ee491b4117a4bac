package main

import (
	"bytes"
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
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// relayBin is the relay binary built once for the end-to-end tests, which
// run it as a subprocess like an operator would.
var relayBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "relay-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	relayBin = filepath.Join(dir, "relay")
	build := exec.Command("go", "build", "-o", relayBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building relay:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if sqsSvc != nil {
		sqsSvc.Stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func id() string { return relay.NewID()[24:] }

// backend is a cross-process broker the tests can bridge.
type backend struct {
	name string
	// pubURL publishes; subURL(group) subscribes in group.
	pubURL string
	subURL func(group string) string
	// large is the size of the largest payload tested on this backend.
	large int
	// queueIsGroup: the topic itself is the group (sqs://), so each
	// "group" of a test needs a topic of its own.
	queueIsGroup bool
}

func redisBackend(t *testing.T) backend {
	u := testenv.Redis(t)
	// A consumer killed with SIGKILL leaves its pending entries to be
	// claimed by another after claim_idle: keep that short for the tests.
	return backend{name: "redis", pubURL: u, large: 1 << 20,
		subURL: func(g string) string { return testenv.WithParams(u, "group", g, "claim_idle", "3s") }}
}

func amqpBackend(t *testing.T) backend {
	u := testenv.AMQP(t)
	return backend{name: "amqp", pubURL: u, large: 1 << 20,
		subURL: func(g string) string { return testenv.WithParams(u, "group", g) }}
}

// kafkaBackend is the cluster named by RELAY_TEST_KAFKA_BROKERS or an
// in-process kfake cluster that this test process serves to the relay
// subprocesses.
func kafkaBackend(t *testing.T) backend {
	brokers := testenv.KafkaBrokers(t)
	if brokers == nil {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(4),
			kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		brokers = c.ListenAddrs()
	}
	base := "kafka://" + brokers[0]
	for _, b := range brokers[1:] {
		base = testenv.WithParams(base, "seed", b)
	}
	pub := testenv.WithParams(base, "metadata_min_age", "100ms")
	return backend{name: "kafka", pubURL: pub, large: 512 << 10,
		subURL: func(g string) string {
			return testenv.WithParams(pub, "group", g, "heartbeat_interval", "100ms", "session_timeout", "6s", "fetch_max_wait", "100ms")
		}}
}

// The SQS/SNS service (goaws run as a subprocess by testenv, unless
// RELAY_TEST_SQS_ENDPOINT names another) is started on first use and
// stopped by TestMain.
var (
	sqsOnce sync.Once
	sqsSvc  *testenv.SQSService
)

// awsURL is the sqs:// or sns:// URL of the test service.
func awsURL(t *testing.T, scheme string) string {
	sqsOnce.Do(func() { sqsSvc = testenv.StartSQS() })
	sqsSvc.Need(t)
	q := url.Values{}
	q.Set("region", sqsSvc.Region)
	if sqsSvc.Endpoint != "" {
		q.Set("endpoint", sqsSvc.Endpoint)
	}
	if sqsSvc.Emulated {
		q.Set("access_key_id", "test")
		q.Set("secret_key", "test")
		if scheme == "sns" {
			q.Set("queue_policy", "false") // goaws cannot set queue policies
		}
	}
	return scheme + "://?" + q.Encode()
}

// awsSub adds the subscriber options the tests want: short long-polls and
// a short visibility, so that messages of a killed bridge come back soon.
func awsSub(raw string, kv ...string) string {
	return testenv.WithParams(raw, append([]string{"wait", "1", "visibility", "6", "extend_every", "2"}, kv...)...)
}

// sqsBackend is plain SQS: the topic is a queue, which is the group.
func sqsBackend(t *testing.T) backend {
	u := awsURL(t, "sqs")
	return backend{name: "sqs", pubURL: u, large: 128 << 10, queueIsGroup: true,
		subURL: func(string) string { return awsSub(u) }}
}

// snsBackend is SNS with an SQS queue per group.
func snsBackend(t *testing.T) backend {
	u := awsURL(t, "sns")
	return backend{name: "sns", pubURL: u, large: 128 << 10,
		subURL: func(g string) string { return awsSub(u, "group", g) }}
}

// backends returns every cross-process backend available; a missing
// broker fails under CI and is skipped (with the reason) locally. The
// shared brokers are held (see holdBrokers) until the test ends.
func backends(t *testing.T) []backend {
	holdBrokers(t)
	return []backend{redisBackend(t), amqpBackend(t), kafkaBackend(t), sqsBackend(t), snsBackend(t)}
}

// holdBrokers holds off restarts of the shared local Redis and RabbitMQ by
// other packages' tests until this test ends (see testenv.HoldBroker).
func holdBrokers(t *testing.T) {
	t.Helper()
	testenv.HoldBroker(t, "redis")
	testenv.HoldBroker(t, "amqp")
}

// provision creates topic and group on b, so that messages published
// afterwards are kept for the group.
func provision(t *testing.T, b backend, topic, group string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := relay.OpenSubscriber(ctx, b.subURL(group))
	if err != nil {
		t.Fatalf("%s: %v", b.name, err)
	}
	defer sub.Close()
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(ctx, topic); err != nil {
			t.Fatalf("%s: provision %s/%s: %v", b.name, topic, group, err)
		}
	}
}

func publish(t *testing.T, b backend, topic string, msgs ...*relay.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, b.pubURL)
	if err != nil {
		t.Fatalf("%s: %v", b.name, err)
	}
	defer pub.Close()
	for len(msgs) > 0 {
		n := min(len(msgs), 500)
		if err := pub.Publish(ctx, topic, msgs[:n]...); err != nil {
			t.Fatalf("%s: publish: %v", b.name, err)
		}
		msgs = msgs[n:]
	}
}

// reader consumes a topic in a group in the background, acking and
// recording every message.
type reader struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	msgs []*relay.Message
	ids  map[string]int // delivery count per ID
	wake chan struct{}
}

func newReader(t *testing.T, b backend, topic, group string) *reader {
	t.Helper()
	sub, err := relay.OpenSubscriber(context.Background(), b.subURL(group))
	if err != nil {
		t.Fatalf("%s: %v", b.name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		_ = sub.Close()
		t.Fatalf("%s: subscribe: %v", b.name, err)
	}
	r := &reader{t: t, cancel: cancel, done: make(chan struct{}), ids: map[string]int{}, wake: make(chan struct{}, 1)}
	go func() {
		defer close(r.done)
		defer sub.Close()
		for m := range ch {
			_ = m.Ack()
			r.mu.Lock()
			r.msgs = append(r.msgs, m)
			r.ids[m.ID]++
			r.mu.Unlock()
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *reader) stop() {
	r.cancel()
	<-r.done
}

// unique returns how many distinct IDs arrived.
func (r *reader) unique() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// waitUnique waits until n distinct IDs arrived or timeout passed.
func (r *reader) waitUnique(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for r.unique() < n {
		select {
		case <-r.wake:
		case <-deadline:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return true
}

// waitIDs waits until every one of ids arrived or timeout passed.
func (r *reader) waitIDs(ids []string, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		missing := slices.ContainsFunc(ids, func(id string) bool { return r.ids[id] == 0 })
		r.mu.Unlock()
		if !missing {
			return true
		}
		select {
		case <-r.wake:
		case <-deadline:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *reader) snapshot() ([]*relay.Message, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make(map[string]int, len(r.ids))
	for k, v := range r.ids {
		ids[k] = v
	}
	return append([]*relay.Message(nil), r.msgs...), ids
}

// proc is a relay subprocess.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string // of /healthz, /readyz, /metrics
	out  *syncBuffer
	err  *syncBuffer
	done chan struct{}
	code int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startEnv runs relay with args and extra environment variables
// (KEY=VALUE); stdin may be nil.
func startEnv(t *testing.T, env []string, stdin io.Reader, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, out: &syncBuffer{}, err: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(relayBin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdin = stdin
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if p.code == -1 && err != nil {
			p.code = -1 // killed by a signal
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// runRelay runs relay to completion and returns its exit code, stdout and
// stderr.
func runRelay(t *testing.T, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	return runRelayEnv(t, nil, stdin, args...)
}

func runRelayEnv(t *testing.T, env []string, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	p := startEnv(t, env, stdin, args...)
	select {
	case <-p.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("relay %v did not finish; stderr:\n%s", args, p.err.String())
	}
	return p.code, p.out.String(), p.err.String()
}

var addrRE = regexp.MustCompile(`serving /healthz, /readyz, /metrics.* address=(\S+)`)

// writeFile writes content to a new file in t's temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// startBridge writes cfg to a file and runs "relay bridge" on it; it
// returns once /readyz says ready.
func startBridge(t *testing.T, cfg string) *proc {
	t.Helper()
	return startBridgeEnv(t, cfg, nil, true)
}

// startBridgeEnv is startBridge with extra environment variables; with
// ready false it returns as soon as the HTTP endpoint serves.
func startBridgeEnv(t *testing.T, cfg string, env []string, ready bool) *proc {
	t.Helper()
	file := writeFile(t, "bridge.yaml", cfg)
	p := startEnv(t, env, nil, "bridge", "-c", file, "--http", "127.0.0.1:0", "--log-level", "debug")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := addrRE.FindStringSubmatch(p.err.String()); m != nil && p.addr == "" {
			p.addr = m[1]
		}
		if p.addr != "" {
			if code, _ := p.get("/readyz"); code == 200 || (!ready && code == 503) {
				return p
			}
		}
		select {
		case <-p.done:
			t.Fatalf("bridge exited with %d before it was ready; stderr:\n%s", p.code, p.err.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_, body := p.get("/readyz")
			t.Fatalf("bridge not ready after 60s: %s\nstderr:\n%s", body, p.err.String())
		}
	}
}

func (p *proc) get(path string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of a sample line of /metrics, e.g.
// `relay_bridge_forwarded_total{route="r"}`.
func (p *proc) metric(name string) float64 {
	p.t.Helper()
	_, body := p.get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				p.t.Fatalf("metric %s: %v", line, err)
			}
			return f
		}
	}
	p.t.Fatalf("metric %s not found in:\n%s", name, body)
	return 0
}

// signal sends sig and waits for the exit code.
func (p *proc) signal(sig syscall.Signal, timeout time.Duration) int {
	p.t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("relay did not exit %v after %v; stderr:\n%s", sig, timeout, p.err.String())
		return 0
	}
}

// waitMetric waits (up to 30s) for a metric to reach want and returns its
// last value.
func (p *proc) waitMetric(name string, want float64) float64 {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := p.metric(name)
		if v == want || time.Now().After(deadline) {
			return v
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
