package bridge_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// processPairs are the pairs BenchmarkBridgeProcess times.
var processPairs = [][2]string{{"redis", "kafka"}, {"amqp", "kafka"}, {"kafka", "redis"}}

// processMessages is BenchmarkBridgeProcess's backlog.
const processMessages = 50000

// BenchmarkBridgeProcess times `relay bridge` as an operator sees it: a
// backlog of 50,000 messages waits in the source; the clock starts when
// the process is started, with a route at its default settings, and stops
// when the destination holds every message. It reports the medians over
// b.N rounds of the whole time (process-s), of the start-up within it
// (ready-s: until /readyz answers; first-s: until the first message is at
// the destination) and of the rate, against the raw ceiling measured in
// the same rounds: min(the client library consuming the source's backlog,
// publishing to the destination) (see rawbench_test.go; both start their
// clocks at their first message, so the ratio charges relay's start-up to
// relay):
//
//	go test -run '^$' -bench BridgeProcess -benchtime 3x -timeout 60m ./bridge
func BenchmarkBridgeProcess(b *testing.B) {
	bs := benchBackends(b)
	byName := map[string]benchBackend{}
	for _, be := range bs {
		byName[be.name] = be
	}
	bin := relayBinary(b)
	for _, pair := range processPairs {
		from, to := byName[pair[0]], byName[pair[1]]
		b.Run(from.name+"-to-"+to.name, func(b *testing.B) {
			defer func(n int) { benchMessages = n }(benchMessages)
			benchMessages = processMessages
			var total, ready, first, ceiling, fwd, paired []float64
			for round := range b.N {
				rc := measureRawConsume(b, from)
				rp := measureRawPublish(b, to)
				rf := measureRawForwardTime(b, from, to)
				r := runBridgeProcess(b, bin, from, to)
				total, ready, first = append(total, r.total.Seconds()), append(ready, r.ready.Seconds()), append(first, r.first.Seconds())
				ceiling = append(ceiling, min(rc.rate, rp.rate))
				fwd, paired = append(fwd, rf.Seconds()), append(paired, rf.Seconds()/r.total.Seconds())
				b.Logf("round %d: raw consume %.0f, raw publish %.0f msg/s, raw forwarding loop %v; bridge process %v (ready %v, first message %v): %.0f msg/s",
					round+1, rc.rate, rp.rate, rf.Round(time.Millisecond), r.total.Round(time.Millisecond), r.ready.Round(time.Millisecond),
					r.first.Round(time.Millisecond), float64(processMessages)/r.total.Seconds())
			}
			rate := float64(processMessages) / medianOf(total)
			b.ReportMetric(medianOf(total), "process-s")
			b.ReportMetric(medianOf(ready), "ready-s")
			b.ReportMetric(medianOf(first), "first-s")
			b.ReportMetric(rate, "process-msg/s")
			b.ReportMetric(medianOf(ceiling), "raw-ceiling-msg/s")
			b.ReportMetric(rate/medianOf(ceiling), "ratio-raw")
			b.ReportMetric(medianOf(fwd), "raw-forward-s")
			b.ReportMetric(medianOf(fwd)/medianOf(total), "ratio-forward")
			b.ReportMetric(medianOf(paired), "ratio-forward-paired")
		})
	}
}

// measureRawForwardTime times the pair's raw forwarding loop
// (rawforward_bench_test.go) over a backlog of benchMessages of its own.
func measureRawForwardTime(b *testing.B, from, to benchBackend) time.Duration {
	run := benchID()
	in, out := "bench-fin-"+run, "bench-fout-"+run
	defer from.raw.drop(in, rawGroup)
	defer to.raw.drop(out, "sink")
	from.raw.prepare(b, in, rawGroup)
	_ = provisioned(b, to, out, "sink").Close()
	fill(b, from, in)
	d, ok := rawForwardTime(b, from, to, in, rawGroup, out)
	if !ok {
		b.Fatalf("no raw forwarding loop for %s -> %s", from.name, to.name)
	}
	return d
}

func medianOf(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type processRun struct{ total, ready, first time.Duration }

// runBridgeProcess fills from with benchMessages, starts a bridge process
// with one route at its defaults to to, and times it until to holds them.
func runBridgeProcess(b *testing.B, bin string, from, to benchBackend) processRun {
	run := benchID()
	in, out, group := "bench-pin-"+run, "bench-pout-"+run, "bridge"
	defer from.raw.drop(in, group)
	defer to.raw.drop(out, "sink")
	_ = provisioned(b, from, in, group).Close()
	_ = provisioned(b, to, out, "sink").Close() // kept and routable
	fill(b, from, in)
	cfg := fmt.Sprintf("routes:\n  - name: r\n    from:\n      url: %q\n      topic: %s\n    to:\n      url: %q\n      topic: %s\n",
		from.subURL(group), in, to.pubURL, out)
	file := filepath.Join(b.TempDir(), "bridge.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	count := destCounter(b, to, out)
	start := time.Now()
	p := startBenchBridge(b, bin, file)
	defer p.stop()
	readyAt := make(chan time.Duration, 1)
	go func() {
		p.waitReadyQuiet()
		readyAt <- time.Since(start)
	}()
	var r processRun
	deadline := start.Add(10 * time.Minute)
	for {
		n := count()
		if n > 0 && r.first == 0 {
			r.first = time.Since(start)
		}
		if n >= int64(benchMessages) {
			r.total = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d at the destination after 10 min", n, benchMessages)
		}
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case r.ready = <-readyAt:
	case <-time.After(time.Minute):
		b.Fatal("relay bridge never answered /readyz")
	}
	return r
}

// waitReadyQuiet is waitReady for a goroutine: it returns once /readyz
// answers 200, or when the process exits or a minute passed.
func (p *benchProc) waitReadyQuiet() {
	deadline := time.After(time.Minute)
	var base string
	select {
	case a := <-p.addr:
		base = "http://" + a
		p.addr <- a // for whoever else waits
	case <-p.done:
		return
	case <-deadline:
		return
	}
	for {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			return
		case <-deadline:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// destCounter returns a function counting the messages topic holds at
// be: a Redis stream's length, the sum of a Kafka topic's end offsets.
func destCounter(b *testing.B, be benchBackend, topic string) func() int64 {
	ctx := context.Background()
	switch r := be.raw.(type) {
	case *rawRedis:
		return func() int64 {
			n, err := r.c.XLen(ctx, topic).Result()
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	case *rawKafka:
		cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		adm := kadm.NewClient(cl)
		return func() int64 {
			ends, err := adm.ListEndOffsets(ctx, topic)
			if err != nil {
				return 0
			}
			var n int64
			ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
			return n
		}
	}
	b.Fatalf("no counter for %s destinations", be.name)
	return nil
}
