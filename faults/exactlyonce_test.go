//go:build faults

package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/router"
)

// runExactlyOnceChild runs a router that forwards RELAY_FAULTS_TOPIC to
// RELAY_FAULTS_OUT exactly-once on the pair of RELAY_FAULTS_URL (source,
// with group and transactional_id) and RELAY_FAULTS_DST, until it is
// killed or gets SIGTERM (then it drains).
func runExactlyOnceChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sub, pub, err := relay.OpenExactlyOnce(openCtx, os.Getenv("RELAY_FAULTS_URL"), os.Getenv("RELAY_FAULTS_DST"))
	if err != nil {
		return fail(err)
	}
	r, err := router.New(router.Config{})
	if err != nil {
		return fail(err)
	}
	r.Own(sub, pub)
	forward := func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		return []*relay.Message{m.Copy()}, nil
	}
	if err := r.AddHandler("eo", sub, os.Getenv("RELAY_FAULTS_TOPIC"), forward, router.WithConcurrency(8),
		router.WithGuarantee(relay.ExactlyOnce), router.WithOutput(pub, os.Getenv("RELAY_FAULTS_OUT"))); err != nil {
		return fail(err)
	}
	if err := r.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// TestKillExactlyOnceKafka: a kafka -> kafka exactly-once router process
// (kfake in this process, the router a child over TCP) is killed with
// SIGKILL twice while it forwards a backlog, and restarted with the same
// transactional_id each time. A read_committed reader of the destination
// receives every ID exactly once: the killed processes' open transactions
// are aborted (by the next instance's registration), their outputs never
// become visible, and their inputs are forwarded again by the next one.
func TestKillExactlyOnceKafka(t *testing.T) {
	start := time.Now()
	l, kills := killForwarderKafka(t, "exactly-once", true)
	r := l.result(t, "exactly-once router SIGKILL x2", "kafka (kfake)",
		fmt.Sprintf("kafka->kafka transactions, read_committed reader; killed at %v of %d forwarded, restarted with the same transactional_id", kills, killForwardTotal))
	record(t, r, start)
	if r.Dups != 0 {
		t.Errorf("%d duplicates seen by the read_committed reader; want 0", r.Dups)
	}
}

// killForwardTotal is how many messages killForwarderKafka publishes.
const killForwardTotal = 5000

// killForwarderKafka is the scenario of the exactly-once kill tests: it
// starts a kfake cluster on a TCP port, publishes killForwardTotal known
// IDs to a 4-partition topic and runs the test binary as a child in
// childEnv mode mode, which forwards RELAY_FAULTS_TOPIC on
// RELAY_FAULTS_URL (the source: a group, and with transactional a
// transactional_id, the same for every child) to RELAY_FAULTS_OUT on
// RELAY_FAULTS_DST. The child is killed with SIGKILL after a fifth and
// after half of the IDs arrived at a read_committed reader of the
// destination, restarted each time, and the last one is stopped with
// SIGTERM once every ID arrived; then a marker is published to the
// destination and awaited, so that every committed copy was read. env is
// added to the children's environment. It returns the reader's ledger
// (the marker is one of its IDs) and how many distinct IDs had arrived at
// each kill; it fails t when the IDs do not all arrive in time.
func killForwarderKafka(t *testing.T, mode string, transactional bool, env ...string) (*ledger, []int) {
	t.Helper()
	const total = killForwardTotal
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DefaultNumPartitions(4),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := "kafka://127.0.0.1:" + strconv.Itoa(port)
	in, out := unique("eo-in"), unique("eo-out")
	params := []string{"group", unique("g"), "session_timeout", "2s", "heartbeat_interval", "200ms", "inflight", "64"}
	if transactional {
		params = append(params, "transactional_id", unique("tx"))
	}
	srcURL := testenv.WithParams(base, params...)

	reader := openSub(t, testenv.WithParams(base, "group", unique("reader"), "isolation", "read_committed"))
	provision(t, reader, out)
	l := newLedger()
	pub := openPub(t, base)
	publishAll(t, l, pub, in, batchOf(total, 64, "eo"), 100, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := reader.Subscribe(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	consume(l, ch, &wg)

	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"="+mode, "RELAY_FAULTS_URL="+srcURL,
			"RELAY_FAULTS_DST="+base, "RELAY_FAULTS_TOPIC="+in, "RELAY_FAULTS_OUT="+out)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // a child left running when t failed early
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return cmd
	}
	received := func() int {
		_, n, _, _ := l.counts()
		return n
	}
	waitReceived := func(n int) {
		deadline := time.Now().Add(90 * time.Second)
		for received() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d forwarded within 90s", received(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var kills []int
	for _, at := range []int{total / 5, total / 2} {
		cmd := child()
		waitReceived(at)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		kills = append(kills, received())
	}
	last := child()
	l.waitAll(120 * time.Second)
	if err := last.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := last.Wait(); err != nil {
		t.Errorf("last child: %v", err)
	}
	// A marker published after the last child stopped: once the reader
	// has it, every committed output before it was delivered.
	marker := relay.NewMessage([]byte("marker"))
	l.expect([]*relay.Message{marker})
	if err := pub.Publish(context.Background(), out, marker); err != nil {
		t.Fatal(err)
	}
	l.waitAll(30 * time.Second)
	cancel()
	_ = reader.Close()
	wg.Wait()
	return l, kills
}
