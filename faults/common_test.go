//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/kafka"
	_ "github.com/go-relay/relay/adapters/memory"
	_ "github.com/go-relay/relay/adapters/mqtt"
	_ "github.com/go-relay/relay/adapters/nats"
	_ "github.com/go-relay/relay/adapters/redisstream"
	_ "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/internal/testkit/faultrows"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	code := m.Run()
	if netSQS != nil {
		netSQS.Stop()
	}
	relayBin.remove()
	pstestBin.remove()
	os.Exit(code)
}

// builtCommand is a command of this module built once per test binary
// (go build of pkg, named name), so that scenarios run it as a process of
// its own; TestMain removes it.
type builtCommand struct {
	pkg, name string
	once      sync.Once
	dir, path string
	err       error
}

// Commands the scenarios run.
var (
	relayBin  = &builtCommand{pkg: "../cmd/relay", name: "relay"}
	pstestBin = &builtCommand{pkg: "../internal/cmd/pstestserver", name: "pstestserver"}
)

// get builds the command on first use and returns its path.
func (c *builtCommand) get(t testing.TB) string {
	t.Helper()
	c.once.Do(func() {
		dir, err := os.MkdirTemp("", "relay-faults-bin-")
		if err != nil {
			c.err = err
			return
		}
		c.dir, c.path = dir, filepath.Join(dir, c.name)
		if out, err := exec.Command("go", "build", "-o", c.path, c.pkg).CombinedOutput(); err != nil {
			c.err = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if c.err != nil {
		t.Fatalf("building %s: %v", c.name, c.err)
	}
	return c.path
}

func (c *builtCommand) remove() {
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// relayBinary returns the path of ./cmd/relay built for this test binary,
// so that tests run "relay bridge", "relay validate" and the like as their
// own processes.
func relayBinary(t testing.TB) string { return relayBin.get(t) }

// Result is one row of the reliability table (shared with the fault
// tests of other packages and with ./report).
type Result = faultrows.Row

// record appends r to the results file named by RELAY_FAULTS_RESULTS (if
// set) and logs it. A lost message or an unexpected ID fails t.
func record(t *testing.T, r Result, start time.Time) {
	t.Helper()
	r.Seconds = time.Since(start).Round(100 * time.Millisecond).Seconds()
	if r.Lost > 0 && r.AllowedLoss == "" {
		r.KnownDefect = knownLoss[r.Scenario+"/"+r.Adapter]
	}
	var times string
	if r.DetectSeconds != nil {
		times += fmt.Sprintf(" detect %.1fs", *r.DetectSeconds)
	}
	if r.RecoverSeconds != nil {
		times += fmt.Sprintf(" recover %.1fs", *r.RecoverSeconds)
	}
	t.Logf("RESULT %s/%s: sent %d received %d lost %d duplicates %d (%.1fs)%s %s",
		r.Scenario, r.Adapter, r.Sent, r.Received, r.Lost, r.Dups, r.Seconds, times, r.Note)
	if err := faultrows.Append(r); err != nil {
		t.Errorf("writing result: %v", err)
	}
	if r.Lost > 0 && r.AllowedLoss != "" {
		t.Logf("lost %d of %d, allowed (%s)", r.Lost, r.Sent, r.AllowedLoss)
	} else if r.Lost > 0 && r.KnownDefect == "" {
		t.Errorf("%s/%s: %d of %d messages lost", r.Scenario, r.Adapter, r.Lost, r.Sent)
	} else if r.Lost > 0 {
		t.Logf("KNOWN DEFECT (open issue, not a pass): %s/%s lost %d of %d: %s", r.Scenario, r.Adapter, r.Lost, r.Sent, r.KnownDefect)
	}
}

// knownLoss names scenario rows whose message loss is an open, documented
// defect (docs/reliability.md, Known limits): the row shows the loss in
// bold with the reason, but does not fail the run. Remove an entry as soon
// as its defect is fixed.
var knownLoss = map[string]string{}

// ledger tracks the IDs sent and the deliveries received. A delivery may
// be recorded before its ID is declared sent (it can overtake the Publish
// return); IDs received but never declared are reported as strangers at
// the end. Safe for concurrent use.
type ledger struct {
	mu      sync.Mutex
	sent    map[string]bool
	got     map[string]int
	missing int // sent IDs not received yet
	changed chan struct{}
}

func newLedger() *ledger {
	return &ledger{sent: map[string]bool{}, got: map[string]int{}, changed: make(chan struct{}, 1)}
}

// expect declares msgs as sent.
func (l *ledger) expect(msgs []*relay.Message) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	l.expectKeys(ids...)
}

// expectKeys declares keys as sent.
func (l *ledger) expectKeys(keys ...string) {
	l.mu.Lock()
	for _, k := range keys {
		if !l.sent[k] {
			l.sent[k] = true
			if l.got[k] == 0 {
				l.missing++
			}
		}
	}
	l.mu.Unlock()
}

func (l *ledger) receive(id string) {
	l.mu.Lock()
	if l.sent[id] && l.got[id] == 0 {
		l.missing--
	}
	l.got[id]++
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// outstanding returns how many sent IDs were not received yet.
func (l *ledger) outstanding() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.missing
}

// counts returns sent, distinct received, lost and duplicates.
func (l *ledger) counts() (sent, received, lost, dups int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.sent {
		n := l.got[id]
		if n == 0 {
			lost++
		} else {
			received++
			dups += n - 1
		}
	}
	return len(l.sent), received, lost, dups
}

// waitAll waits until every sent ID was received or limit passed.
func (l *ledger) waitAll(limit time.Duration) {
	deadline := time.After(limit)
	for {
		l.mu.Lock()
		missing := l.missing
		l.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-l.changed:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			return
		}
	}
}

// result builds the row for the ledger and fails t for strangers.
func (l *ledger) result(t *testing.T, scenario, adapter, note string) Result {
	t.Helper()
	sent, received, lost, dups := l.counts()
	l.mu.Lock()
	var unknown []string
	for id := range l.got {
		if !l.sent[id] {
			unknown = append(unknown, id)
		}
	}
	l.mu.Unlock()
	if len(unknown) > 0 {
		sort.Strings(unknown)
		t.Errorf("%s/%s: %d IDs received that were never sent, e.g. %q", scenario, adapter, len(unknown), unknown[:min(5, len(unknown))])
	}
	return Result{Scenario: scenario, Adapter: adapter, Sent: sent, Received: received, Lost: lost, Dups: dups, Note: note}
}

// consume acks every delivery of ch into l until ch closes.
func consume(l *ledger, ch <-chan *relay.Message, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range ch {
			l.receive(m.ID)
			_ = m.Ack()
		}
	}()
}

// consumeInto subscribes sub to topic and acks every delivery into l
// (see consume); stop ends the subscription, closes sub and waits for the
// consumer.
func consumeInto(t testing.TB, l *ledger, sub relay.Subscriber, topic string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	consume(l, ch, &wg)
	return func() {
		cancel()
		_ = sub.Close()
		wg.Wait()
	}
}

// startChild starts the test binary as a child process in mode (see
// runChild) with env added, its stderr on this process's, and returns it
// with its stdout.
func startChild(t testing.TB, mode string, env ...string) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

func unique(prefix string) string { return prefix + "-" + relay.NewID()[24:] }

func openPub(t testing.TB, raw string) relay.Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := relay.OpenPublisher(ctx, raw)
	if err != nil {
		t.Fatalf("OpenPublisher(%s): %v", relay.Redact(raw), err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func openSub(t testing.TB, raw string) relay.Subscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := relay.OpenSubscriber(ctx, raw)
	if err != nil {
		t.Fatalf("OpenSubscriber(%s): %v", relay.Redact(raw), err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// provision creates topic and the subscriber's group ahead of publishing.
func provision(t testing.TB, s relay.Subscriber, topic string) {
	t.Helper()
	p, ok := s.(relay.Provisioner)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Provision(ctx, topic); err != nil {
		t.Fatalf("Provision(%s): %v", topic, err)
	}
}

// batchOf returns n new messages with distinct payloads of size bytes.
func batchOf(n, size int, tag string) []*relay.Message {
	out := make([]*relay.Message, n)
	for i := range out {
		p := make([]byte, size)
		copy(p, fmt.Sprintf("%s %d", tag, i))
		out[i] = relay.NewMessage(p)
	}
	return out
}

// publishAll publishes msgs in batches, retrying a failed batch (the same
// IDs, so a retry shows up as a duplicate, never as a stranger) until it
// is accepted or limit passes. It returns how many Publish calls failed.
func publishAll(t testing.TB, l *ledger, p relay.Publisher, topic string, msgs []*relay.Message, batch int, progress func(done int)) (failures int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; i < len(msgs); i += batch {
		b := msgs[i:min(i+batch, len(msgs))]
		l.expect(b)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			err := p.Publish(ctx, topic, b...)
			cancel()
			if err == nil {
				break
			}
			failures++
			if time.Now().After(deadline) {
				t.Fatalf("publishing %d messages: still failing after 3m: %v", len(b), err)
			}
			t.Logf("publish failed (retrying the batch): %v", err)
			time.Sleep(200 * time.Millisecond)
		}
		if progress != nil {
			progress(i + len(b))
		}
	}
	return failures
}

var (
	redisURL = func(t testing.TB) string { return testenv.Redis(t) }
	amqpURL  = func(t testing.TB) string { return testenv.AMQP(t) }
)
