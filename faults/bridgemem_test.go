//go:build faults

package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The documented bound of a bridge process's memory (docs/bridge.md):
// while it forwards, the peak resident set (VmHWM) of a `relay bridge`
// process with one route stays at most
//
//	bridgeMemBase + bridgeMemPerWindow × the source's inflight_bytes
//
// that is 128 MiB + 4 × 64 MiB = 384 MiB with the default window, whatever
// the message size and however long the stream. The source's window
// (from.inflight messages, at most inflight_bytes of them) is what scales:
// a message it holds is in memory as read from the source and while it is
// published, one read briefly takes two to three times its size, and Go's
// collector lets the heap grow to twice what is live (GOGC=100), more
// while large messages are allocated during a collection. The base covers
// the runtime, the clients and a window of small messages; the factor
// of the window covers the rest (one reply decoded at two to three times
// its size, the collector's headroom), with room. docs/bridge.md
// ("Memory") gives the current figures.
const (
	// bridgeMemBase is the fixed part: the runtime, the clients and their
	// buffers, the route's bookkeeping, with headroom for another
	// machine's allocator, page sizes and GC pacing.
	bridgeMemBase = 128 << 20
	// bridgeMemPerWindow is how many times the source's inflight_bytes
	// the peak may add to the base (see above).
	bridgeMemPerWindow = 4
)

// bridgeMemBound is the bound on the peak RSS of a bridge whose source
// has a window of inflightBytes.
func bridgeMemBound(inflightBytes int64) int64 {
	return bridgeMemBase + bridgeMemPerWindow*inflightBytes
}

// Message counts of TestBridgeMemory. The 1 MiB cases forward
// bridgeMemLargeN messages (23 windows of the default 64 MiB), enough for
// the peak to show while keeping the case short enough for `make faults`
// (the race detector slows this process's producer and reader, not the
// bridge). With RELAY_BRIDGE_MEMORY_FULL=1 the default-window case
// forwards bridgeMemFullN (100 GiB through the bridge: several minutes;
// give go test -timeout 60m).
const (
	bridgeMemSmallN = 100_000
	bridgeMemLargeN = 1_500
	bridgeMemFullN  = 100_000
	// bridgeMemBacklog bounds the bytes published and not yet seen at
	// the destination, so that Redis never holds more than that (plus
	// what the trimmer has not removed yet) of the test's streams.
	bridgeMemBacklog = 200 << 20
	// every bridgeMemSampleEvery-th message's payload is checksummed at
	// the destination; every payload's length is checked.
	bridgeMemSampleEvery = 50
)

// TestBridgeMemory runs `relay bridge` (./cmd/relay, built by the test)
// as a child process with one redis -> redis route and forwards
// 100,000 messages of 100 B, then bridgeMemLargeN of 1 MiB (with the
// default window and with inflight_bytes=16MiB on the source URL), while
// this process publishes (throttled: at most bridgeMemBacklog not yet
// forwarded) and drains and acks the destination, deleting what was
// forwarded from both streams. Every ID must arrive, with its payload's
// length and (for a sample) checksum, and the child's peak RSS (VmHWM
// of /proc/<pid>/status) must stay within bridgeMemBound of the source's
// inflight_bytes.
func TestBridgeMemory(t *testing.T) {
	large := bridgeMemLargeN
	if os.Getenv("RELAY_BRIDGE_MEMORY_FULL") == "1" {
		large = bridgeMemFullN
	}
	cases := []struct {
		name          string
		n, size       int
		inflightBytes string // "" = the default
	}{
		{"100B", bridgeMemSmallN, 100, ""},
		{"1MiB", large, 1 << 20, ""},
		{"1MiB-window16MiB", bridgeMemLargeN, 1 << 20, "16MiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bridgeMemScenario(t, c.n, c.size, c.inflightBytes)
		})
	}
}

func bridgeMemScenario(t *testing.T, n, size int, inflightBytes string) {
	start := time.Now()
	testenv.HoldBroker(t, "redis")
	base := redisURL(t)
	window := int64(driver.DefaultInFlightBytes)
	src := base
	if inflightBytes != "" {
		var err error
		if window, err = driver.ParseBytes(inflightBytes); err != nil {
			t.Fatal(err)
		}
		src = testenv.WithParams(base, "inflight_bytes", inflightBytes)
	}
	bound := bridgeMemBound(window)
	in, out := unique("faults-mem-in"), unique("faults-mem-out")
	bridgeGroup, readerGroup := unique("bridge"), unique("reader")

	opts, err := redis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() {
		_ = rdb.Del(context.Background(), in, out).Err()
		_ = rdb.Close()
	})
	// Both groups exist before anything is published, so that nothing is
	// missed and the trimmer knows what each has acked.
	first := openSub(t, testenv.WithParams(base, "group", bridgeGroup))
	provision(t, first, in)
	_ = first.Close()
	reader := openSub(t, testenv.WithParams(base, "group", readerGroup, "inflight", "256"))
	provision(t, reader, out)

	cfg := fmt.Sprintf(`http: {disabled: true}
log: {level: warn}
routes:
  - name: mem
    from: {url: %q, topic: %q, group: %q}
    to: {url: %q, topic: %q}
`, src, in, bridgeGroup, base, out)
	cfgPath := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(relayBinary(t), "bridge", "--config", cfgPath)
	// The bridge's defaults, not this process's GC settings.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	mem := sampleMemory(cmd.Process.Pid, 100*time.Millisecond)
	defer mem.stop()

	// The reader: every ID into the ledger, every payload's length, a
	// sample's checksum.
	l := newLedger()
	var (
		sumMu   sync.Mutex
		sums    = map[string]uint32{} // sampled ID -> expected checksum
		badLen  int
		badSum  int
		checked int
	)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := reader.Subscribe(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for m := range ch {
			sumMu.Lock()
			want, sampled := sums[m.ID]
			sumMu.Unlock()
			switch {
			case len(m.Payload) != size:
				badLen++
			case sampled:
				checked++
				if crc32.Checksum(m.Payload, castagnoli) != want {
					badSum++
				}
			}
			l.receive(m.ID)
			_ = m.Ack()
		}
	}()

	// The trimmer: what both groups acked is deleted, so that Redis holds
	// only the backlog.
	trimDone := make(chan struct{})
	go func() {
		defer close(trimDone)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, s := range [][2]string{{in, bridgeGroup}, {out, readerGroup}} {
				if err := trimAcked(ctx, rdb, s[0], s[1]); err != nil && ctx.Err() == nil {
					t.Logf("trimming %s: %v", s[0], err)
				}
			}
		}
	}()

	// The producer, throttled by what the destination has not seen yet.
	pub := openPub(t, base)
	batch := max(1, min(500, (8<<20)/size))
	backlog := max(batch, min(20_000, bridgeMemBacklog/size))
	filler := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(size), uint64(n)))
	for i := range filler {
		filler[i] = byte(rng.Uint32())
	}
	for i := 0; i < n; i += batch {
		// A hang guard, not a speed check: stalled fires only when the
		// destination has seen nothing new for two minutes, and every
		// message it sees re-arms it.
		const stallAfter = 2 * time.Minute
		stalled := time.NewTimer(stallAfter)
		last := l.outstanding()
		for l.outstanding()+batch > backlog {
			select {
			case err := <-exited:
				stopped = true
				t.Fatalf("the bridge exited while forwarding: %v\n%.4000s", err, stderr.String())
			case <-stalled.C:
				t.Fatalf("nothing forwarded for %v: %d of %d published, %d not seen at the destination", stallAfter, i, n, l.outstanding())
			case <-time.After(5 * time.Millisecond):
			}
			if o := l.outstanding(); o < last {
				last = o
				stalled.Reset(stallAfter)
			}
		}
		stalled.Stop()
		msgs := make([]*relay.Message, min(batch, n-i))
		for j := range msgs {
			p := bytes.Clone(filler)
			copy(p, fmt.Sprintf("mem %d ", i+j))
			m := relay.NewMessage(p)
			if (i+j)%bridgeMemSampleEvery == 0 {
				sumMu.Lock()
				sums[m.ID] = crc32.Checksum(p, castagnoli)
				sumMu.Unlock()
			}
			msgs[j] = m
		}
		publishAll(t, l, pub, in, msgs, batch, nil)
	}
	published := time.Since(start)
	l.waitAll(3 * time.Minute)
	forwarded := time.Since(start)
	peak, peakRSS, curve := mem.stop()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("relay bridge after SIGTERM: %v\n%.4000s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Errorf("relay bridge did not exit within 1m of SIGTERM")
	}
	cancel()
	_ = reader.Close()
	<-readerDone
	<-trimDone

	if badLen > 0 {
		t.Errorf("%d payloads arrived with a length other than %d", badLen, size)
	}
	if badSum > 0 || checked == 0 {
		t.Errorf("%d of %d sampled payloads arrived with another checksum", badSum, checked)
	}
	window16 := ""
	if inflightBytes != "" {
		window16 = ", inflight_bytes=" + inflightBytes
	}
	r := l.result(t, "bridge memory: "+sizeName(size)+window16, "redisstream → redisstream", fmt.Sprintf(
		"`relay bridge` child, window inflight=%d%s; peak RSS (VmHWM) %s, bound %s = %s + %d × inflight_bytes %s; highest 100 ms VmRSS sample %s; %d sampled checksums ok; forwarded in %.1fs (published in %.1fs)",
		bridge.DefaultSourceInFlight, window16, mib(peak), mib(bound), mib(bridgeMemBase), bridgeMemPerWindow, mib(window), mib(peakRSS),
		checked-badSum, forwarded.Seconds(), published.Seconds()))
	record(t, r, start)
	t.Logf("VmRSS curve (MiB, max per tenth of the run): %s", curve)
	if peak > bound {
		t.Errorf("peak RSS of the bridge %s > bound %s (%s + %d × inflight_bytes %s) forwarding %d messages of %d B",
			mib(peak), mib(bound), mib(bridgeMemBase), bridgeMemPerWindow, mib(window), n, size)
	}
}

// trimAcked deletes the entries of stream key that group has received
// and acked: those below both its smallest pending ID and its last
// delivered ID. (An entry delivered after XINFO is above the last
// delivered ID read; one acked after XPENDING is merely kept a little
// longer.)
func trimAcked(ctx context.Context, rdb *redis.Client, key, group string) error {
	groups, err := rdb.XInfoGroups(ctx, key).Result()
	if err != nil {
		return err
	}
	last := ""
	for _, g := range groups {
		if g.Name == group {
			last = g.LastDeliveredID
		}
	}
	if last == "" || last == "0-0" {
		return nil
	}
	p, err := rdb.XPending(ctx, key, group).Result()
	if err != nil {
		return err
	}
	minID := last
	if p.Count > 0 && streamIDLess(p.Lower, last) {
		minID = p.Lower
	}
	return rdb.XTrimMinID(ctx, key, minID).Err()
}

// streamIDLess compares two Redis stream IDs ("ms-seq").
func streamIDLess(a, b string) bool {
	split := func(s string) (uint64, uint64) {
		ms, seq, _ := strings.Cut(s, "-")
		x, _ := strconv.ParseUint(ms, 10, 64)
		y, _ := strconv.ParseUint(seq, 10, 64)
		return x, y
	}
	am, as := split(a)
	bm, bs := split(b)
	return am < bm || am == bm && as < bs
}

// memSampler polls a process's VmRSS and VmHWM.
type memSampler struct {
	pid     int
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	samples []int64 // VmRSS, bytes
	hwm     int64
	stopped chan struct{}
}

// sampleMemory starts polling /proc/pid/status every period.
func sampleMemory(pid int, period time.Duration) *memSampler {
	s := &memSampler{pid: pid, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			s.read()
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *memSampler) read() {
	rss, hwm, err := procMemory(s.pid)
	if err != nil {
		return // exited
	}
	s.mu.Lock()
	s.samples = append(s.samples, rss)
	s.hwm = max(s.hwm, hwm)
	s.mu.Unlock()
}

// stop ends the polling, reads VmHWM a last time and returns it, the
// highest VmRSS sample and the curve of VmRSS (the highest sample of
// each tenth of the run, in MiB).
func (s *memSampler) stop() (hwm, peakRSS int64, curve string) {
	s.once.Do(func() {
		close(s.done)
		<-s.stopped
		s.read()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	const buckets = 10
	for b := range buckets {
		lo, hi := b*len(s.samples)/buckets, (b+1)*len(s.samples)/buckets
		var m int64
		for _, v := range s.samples[lo:hi] {
			m = max(m, v)
		}
		peakRSS = max(peakRSS, m)
		if hi > lo {
			parts = append(parts, strconv.FormatInt(m>>20, 10))
		}
	}
	return s.hwm, peakRSS, strings.Join(parts, " ")
}

// procMemory reads VmRSS and VmHWM (bytes) of /proc/pid/status.
func procMemory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || name != "VmRSS" && name != "VmHWM" {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %q: %w", name, v, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if hwm == 0 {
		return 0, 0, errors.New("no VmHWM in /proc/" + strconv.Itoa(pid) + "/status")
	}
	return rss, hwm, nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func sizeName(size int) string {
	if size >= 1<<20 && size%(1<<20) == 0 {
		return strconv.Itoa(size>>20) + " MiB"
	}
	return strconv.Itoa(size) + " B"
}
