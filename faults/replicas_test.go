//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

// A replica scenario runs three `relay bridge` processes on one config
// file (only the HTTP address and, for exactly-once, the transactional_id
// come from each process's environment) that share one route's source
// group through the source's own mechanism, publishes a keyed backlog and
// then live traffic, and injects one fault into one replica:
//
//   - kill: SIGKILL mid-drain;
//   - freeze: SIGSTOP for longer than the source's lease (session
//     timeout, ack_wait, claim idle time, visibility timeout, heartbeat,
//     lease), then SIGCONT; the woken replica must forward again;
//   - scale: SIGKILL of one mid-stream and a fourth replica added later.
//
// A reader of the destination reconciles: 0 lost, duplicates within the
// documented overlap (0 with exactly-once), and on ordered routes the
// messages of each Key first arrive in publish order.
type replicaCase struct {
	adapter   string // row label
	src       string // the route's source URL; ${RELAY_FAULTS_TXID} is per replica
	pub       string // publisher URL of the source
	dst       string // the route's destination URL
	reader    string // subscriber URL of the destination (its own group)
	guarantee string
	// lease is the source's lease as configured in src; a freeze lasts
	// lease plus freezeExtra.
	lease time.Duration
	// overlap bounds the duplicates a SIGKILL may leave (0:
	// exactly-once); a freeze may leave twice as many (see maxDups).
	overlap int
	// ordered routes must keep per-Key order across replicas.
	ordered bool
	// readCommitted is noted for Kafka destinations.
	how string
}

const (
	replicaBacklog = 2000
	replicaLive    = 2000
	replicaKeys    = 32
	// replicaWindow is every replica's source window (inflight), which
	// bounds what one replica holds at a fault.
	replicaWindow = 64
	freezeExtra   = 3 * time.Second
)

// replicaConfig is the one config file of every replica.
func replicaConfig(c replicaCase, in, out string) string {
	conc := 16
	if c.ordered {
		conc = 16 // per-Key order holds at any concurrency: one lane per Key
	}
	return fmt.Sprintf(`name: replicas
log: {level: warn, summary_interval: off}
http: {address: "${RELAY_FAULTS_HTTP}"}
shutdown_timeout: 15s
routes:
  - name: r
    from: {url: %q, topic: %q, inflight: %d}
    to: {url: %q, topic: %q}
    guarantee: %s
    concurrency: %d
    batch: 16
`, c.src, in, replicaWindow, c.dst, out, c.guarantee, conc)
}

// replica is one `relay bridge` process.
type replica struct {
	n    int
	cmd  *exec.Cmd
	http string
	log  *prefixWriter
	done chan struct{}
	err  error // Wait's result, once done is closed
}

func (r *replica) status(t testing.TB) (bridge.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.http+"/routes", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return bridge.Status{}, err
	}
	defer resp.Body.Close()
	var st bridge.Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// forwarded is the replica's forwarded counter, -1 when it does not answer.
func (r *replica) forwarded(t testing.TB) int64 {
	st, err := r.status(t)
	if err != nil || len(st.Routes) == 0 {
		return -1
	}
	return st.Routes[0].Forwarded
}

func freePort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startReplica(t *testing.T, cfgPath string, n int, txid string) *replica {
	t.Helper()
	r := &replica{n: n, http: freePort(t), done: make(chan struct{})}
	r.cmd = exec.Command(relayBinary(t), "bridge", "--config", cfgPath)
	r.cmd.Env = append(os.Environ(), "RELAY_FAULTS_HTTP="+r.http, "RELAY_FAULTS_TXID="+txid)
	r.log = &prefixWriter{t: t, prefix: fmt.Sprintf("replica %d: ", n)}
	r.cmd.Stderr = r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Signal(syscall.SIGCONT)
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// prefixWriter logs a child's stderr lines into the test log.
type prefixWriter struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex
	buf    []byte
	fences int // lines saying an exactly-once pair was fenced
}

// fenced returns how many times the child said its exactly-once pair was
// fenced.
func (w *prefixWriter) fenced() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fences
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		if strings.Contains(line, "exactly-once pair fenced") {
			w.fences++
		}
		w.t.Log(w.prefix + line)
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

// orderLog records, per Key, the sequence numbers in the order of their
// first arrival.
type orderLog struct {
	mu    sync.Mutex
	seen  map[string]bool
	first map[string][]int
}

func (o *orderLog) add(m *relay.Message) {
	key, seqs, ok := strings.Cut(string(m.Payload), " ")
	if !ok {
		return
	}
	seq, err := strconv.Atoi(strings.TrimRight(seqs, "\x00"))
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[m.ID] {
		return
	}
	o.seen[m.ID] = true
	o.first[key] = append(o.first[key], seq)
}

// outOfOrder counts messages that first arrived after a later one of
// their Key.
func (o *orderLog) outOfOrder() (n int, example string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, seqs := range o.first {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				if n == 0 {
					example = fmt.Sprintf("key %s: %d after %d", key, seqs[i], seqs[i-1])
				}
				n++
			}
		}
	}
	return n, example
}

// keyedBatch returns n messages over replicaKeys Keys numbered from seq0
// per Key: the payload is "KEY SEQ".
func keyedBatch(n, from int) []*relay.Message {
	out := make([]*relay.Message, n)
	for i := range out {
		k := (from + i) % replicaKeys
		m := relay.NewMessage(fmt.Appendf(nil, "k%02d %d", k, from+i))
		m.Key = fmt.Sprintf("k%02d", k)
		out[i] = m
	}
	return out
}

// replicaOutcome is what runReplicas measured.
type replicaOutcome struct {
	l          *ledger
	order      *orderLog
	faultAt    int      // distinct IDs received at the fault
	resumeSecs *float64 // freeze: SIGCONT until the woken replica forwarded again
	exits      []string // how each replica ended
	fences     int      // times the faulty replica's exactly-once pair was fenced
	states     []string // the faulty replica's route states after it woke, in order, each once
}

// runReplicas runs scenario fault ("kill", "freeze", "scale") of c.
func runReplicas(t *testing.T, c replicaCase, fault string) replicaOutcome {
	in, out := unique("rep-in"), unique("rep-out")
	cfgPath := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(cfgPath, []byte(replicaConfig(c, in, out)), 0o600); err != nil {
		t.Fatal(err)
	}
	src := openSub(t, strings.ReplaceAll(c.src, "${RELAY_FAULTS_TXID}", "provision"))
	provision(t, src, in)
	_ = src.Close()
	reader := openSub(t, c.reader)
	provision(t, reader, out)
	o := replicaOutcome{l: newLedger(), order: &orderLog{seen: map[string]bool{}, first: map[string][]int{}}}
	l := o.l
	pub := openPub(t, c.pub)
	publishAll(t, l, pub, in, keyedBatch(replicaBacklog, 0), 100, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := reader.Subscribe(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range ch {
			o.order.add(m)
			l.receive(m.ID)
			_ = m.Ack()
		}
	}()
	txid := func(n int) string { return unique(fmt.Sprintf("tx%d", n)) }
	reps := []*replica{}
	for n := range 3 {
		reps = append(reps, startReplica(t, cfgPath, n, txid(n)))
	}
	received := func() int { _, n, _, _ := l.counts(); return n }

	// Live traffic: replicaLive more messages over about the fault's
	// span, so that the woken replica has work when it comes back.
	span := c.lease + freezeExtra + 6*time.Second
	liveDone := make(chan struct{})
	go func() {
		defer close(liveDone)
		const step = 50
		pause := span / time.Duration(replicaLive/step)
		for i := 0; i < replicaLive; i += step {
			publishAll(t, l, pub, in, keyedBatch(step, replicaBacklog+i), step, nil)
			time.Sleep(pause)
		}
	}()
	waitFor := func(n int, limit time.Duration) {
		deadline := time.Now().Add(limit)
		for received() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d forwarded within %v", received(), n, limit)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(replicaBacklog/3, 90*time.Second)
	o.faultAt = received()
	victim := reps[0]
	switch fault {
	case "kill", "scale":
		_ = victim.cmd.Process.Signal(syscall.SIGKILL)
		<-victim.done
		if fault == "scale" {
			waitFor(o.faultAt+replicaBacklog/3, 90*time.Second)
			reps = append(reps, startReplica(t, cfgPath, 3, txid(3)))
		}
	case "freeze":
		// Forwarded more than its window past what it had at the
		// freeze: it forwarded something it did not hold then.
		before := victim.forwarded(t) + replicaWindow
		_ = victim.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(c.lease + freezeExtra)
		_ = victim.cmd.Process.Signal(syscall.SIGCONT)
		woke := time.Now()
		deadline := woke.Add(60 * time.Second)
		// A fenced session leaves the group as it closes: it may be seen
		// holding partitions for a moment, but not when the wait ends.
		fencedHolding := false
		for time.Now().Before(deadline) {
			if st, err := victim.status(t); err == nil && len(st.Routes) > 0 {
				if s := st.Routes[0].State; len(o.states) == 0 || o.states[len(o.states)-1] != s {
					o.states = append(o.states, s)
				}
				if st.Routes[0].State == bridge.StateFenced && st.Routes[0].Ready {
					t.Error("a fenced route says it is ready")
				}
				if h := st.Routes[0].Holds; st.Routes[0].State == bridge.StateFenced && h != nil && len(h.Partitions) > 0 {
					fencedHolding = true
				} else {
					fencedHolding = false
				}
			}
			if f := victim.forwarded(t); f > before {
				s := time.Since(woke).Seconds()
				o.resumeSecs = &s
				break
			}
			select {
			case <-victim.done:
				t.Errorf("the woken replica exited: %v", victim.err)
				deadline = time.Now()
			case <-time.After(50 * time.Millisecond):
			}
		}
		if o.resumeSecs == nil {
			t.Errorf("the woken replica did not forward again within 60s")
		}
		if o.resumeSecs == nil && fencedHolding {
			t.Errorf("the woken replica stayed fenced, holding partitions it cannot serve")
		}
	}
	<-liveDone
	l.waitAll(120 * time.Second)
	for _, r := range reps {
		select {
		case <-r.done:
			o.exits = append(o.exits, fmt.Sprintf("%d: %v", r.n, r.err))
			continue
		default:
		}
		if st, err := r.status(t); err == nil && len(st.Routes) > 0 {
			t.Logf("replica %d before SIGTERM: state %s, forwarded %d, failed %d", r.n, st.Routes[0].State, st.Routes[0].Forwarded, st.Routes[0].Failed)
		}
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	o.fences = victim.log.fenced()
	for _, r := range reps {
		<-r.done
		if r.err != nil && !(r == victim && fault != "freeze") {
			t.Errorf("replica %d exited: %v", r.n, r.err)
		}
	}
	// A marker after every replica stopped: once the reader has it, every
	// copy before it was delivered (Kafka read_committed included).
	marker := relay.NewMessage([]byte("marker"))
	l.expect([]*relay.Message{marker})
	dpub := openPub(t, c.dstPublisher())
	if err := dpub.Publish(context.Background(), out, marker); err != nil {
		t.Fatal(err)
	}
	l.waitAll(30 * time.Second)
	cancel()
	_ = reader.Close()
	wg.Wait()
	return o
}

// maxDups is the documented overlap of fault: what the faulty replica
// held (overlap), and after a freeze as much again: a receive it had asked
// for before it froze can be answered meanwhile (the messages wait in its
// socket while their lease runs out, go to the others, and are forwarded
// again when it wakes).
func (c replicaCase) maxDups(fault string) int {
	if fault == "freeze" {
		return 2 * c.overlap
	}
	return c.overlap
}

// dstPublisher is the URL that publishes the marker to the destination.
func (c replicaCase) dstPublisher() string { return c.dst }

// replicaRow records the outcome of fault on c as a row and checks it.
func replicaRow(t *testing.T, c replicaCase, fault string, start time.Time, o replicaOutcome) {
	t.Helper()
	scenario := map[string]string{
		"kill":   "3 bridge replicas, one SIGKILLed",
		"freeze": "3 bridge replicas, one frozen past its lease",
		"scale":  "scale-out: 3 replicas, one SIGKILLed, one added",
	}[fault]
	note := fmt.Sprintf("guarantee %s; %d backlog + %d live over %d Keys, window %d per replica; fault after %d forwarded; %s",
		c.guarantee, replicaBacklog, replicaLive, replicaKeys, replicaWindow, o.faultAt, c.how)
	r := o.l.result(t, scenario, c.adapter, note)
	if o.resumeSecs != nil {
		r.RecoverSeconds = o.resumeSecs
		r.Note += fmt.Sprintf("; the woken replica forwarded again after %.1fs (states %v)", *o.resumeSecs, o.states)
	}
	if c.guarantee == "exactly-once" && fault == "freeze" {
		r.Note += fmt.Sprintf("; its pair was fenced %d times (0: the freeze fell between transactions)", o.fences)
	}
	record(t, r, start)
	if bound := c.maxDups(fault); r.Dups > bound {
		t.Errorf("%d duplicates; the documented overlap is at most %d", r.Dups, bound)
	}
	if c.ordered {
		if n, ex := o.order.outOfOrder(); n > 0 {
			t.Errorf("per-Key order broken %d times (%s)", n, ex)
		}
	}
}
