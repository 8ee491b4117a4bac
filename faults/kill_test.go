//go:build faults

package faults

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The child process: the test binary re-executed with childEnv set runs
// runChild instead of the tests.
const childEnv = "RELAY_FAULTS_CHILD"

// runChild in mode "hold" subscribes to RELAY_FAULTS_TOPIC with the
// subscriber URL RELAY_FAULTS_URL, receives messages without settling
// them, prints "HOLDING n" once it holds RELAY_FAULTS_HOLD of them and
// then waits to be killed.
func runChild(mode string) int {
	switch mode {
	case "hold":
	case "slow":
		return runSlowChild()
	case "outbox":
		return runOutboxChild()
	case "exactly-once":
		return runExactlyOnceChild()
	case "eo-bridge":
		return runEOBridgeChild()
	case "delay":
		return runDelayChild()
	case "delaymover":
		return runMoverChild()
	case "atmostonce":
		return runAtMostOnceChild()
	case "sqlite-writer":
		return runSQLiteWriterChild()
	default:
		fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
		return 2
	}
	want, _ := strconv.Atoi(os.Getenv("RELAY_FAULTS_HOLD"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := relay.OpenSubscriber(ctx, os.Getenv("RELAY_FAULTS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	ch, err := sub.Subscribe(context.Background(), os.Getenv("RELAY_FAULTS_TOPIC"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	var held []*relay.Message
	for m := range ch {
		held = append(held, m) // never settled
		if len(held) == want {
			fmt.Printf("HOLDING %d\n", len(held))
		}
	}
	fmt.Fprintln(os.Stderr, "child: subscription ended")
	return 1
}

// killScenario publishes killTotal messages, starts a child process that
// takes killHold of them and holds them unacked, starts a second member of
// the same group in this process, kills the child with SIGKILL and
// reconciles: the second member must get every message, the held ones
// through the broker's redelivery (connection loss, claim of idle pending
// entries, group rebalance or visibility timeout, per backend).
const (
	killTotal = 1000
	killHold  = 100
)

func killScenario(t *testing.T, adapter, pubURL, childURL, memberURL, how string) {
	start := time.Now()
	topic := unique("faults-kill")
	l := newLedger()
	member := openSub(t, memberURL)
	provision(t, member, topic)
	pub := openPub(t, pubURL)
	publishAll(t, l, pub, topic, batchOf(killTotal, 64, adapter), 50, nil)

	cmd := startHolder(t, childURL, topic)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := member.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	consume(l, ch, &wg)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	l.waitAll(90 * time.Second)
	cancel()
	_ = member.Close()
	wg.Wait()
	record(t, l.result(t, "consumer SIGKILL", adapter,
		fmt.Sprintf("child held %d unacked of %d; %s", killHold, killTotal, how)), start)
}

// startHolder starts a child process that subscribes to topic with the
// subscriber URL childURL and holds killHold messages unsettled, and
// returns once it reports holding them; the child is killed at cleanup
// if the test has not.
func startHolder(t *testing.T, childURL, topic string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=hold", "RELAY_FAULTS_URL="+childURL,
		"RELAY_FAULTS_TOPIC="+topic, "RELAY_FAULTS_HOLD="+strconv.Itoa(killHold))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	holding := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "HOLDING") {
				holding <- sc.Text()
			}
		}
		close(holding)
	}()
	select {
	case line, ok := <-holding:
		if !ok {
			t.Fatal("child exited before holding its messages")
		}
		t.Logf("child %d: %s", cmd.Process.Pid, line)
	case <-time.After(60 * time.Second):
		t.Fatal("child did not report holding messages within 60s")
	}
	return cmd
}

func TestKillRedis(t *testing.T) {
	base := redisURL(t)
	group := unique("g")
	killScenario(t, "redisstream", base,
		testenv.WithParams(base, "group", group, "inflight", strconv.Itoa(killHold)),
		testenv.WithParams(base, "group", group, "inflight", "64", "claim_idle", "2s", "claim_every", "500ms"),
		"pending entries claimed after claim_idle=2s")
}

func TestKillRabbitMQ(t *testing.T) {
	base := amqpURL(t)
	group := unique("g")
	killScenario(t, "amqp", base,
		testenv.WithParams(base, "group", group, "inflight", strconv.Itoa(killHold)),
		testenv.WithParams(base, "group", group, "inflight", "64"),
		"broker requeues on connection loss")
}

func TestKillKafka(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := "kafka://127.0.0.1:" + strconv.Itoa(port)
	group := unique("g")
	opts := []string{"group", group, "session_timeout", "2s", "heartbeat_interval", "200ms"}
	killScenario(t, "kafka (kfake)", base,
		testenv.WithParams(base, append(opts, "inflight", strconv.Itoa(killHold))...),
		testenv.WithParams(base, append(opts, "inflight", "64")...),
		"group rebalances after session_timeout=2s; uncommitted offsets re-read")
}

func TestKillSQS(t *testing.T) {
	svc := testenv.StartSQS()
	defer svc.Stop()
	svc.Need(t)
	base := sqsURLOf(svc)
	killScenario(t, "sqs (goaws)", base,
		testenv.WithParams(base, "inflight", strconv.Itoa(killHold), "visibility", "3"),
		testenv.WithParams(base, "inflight", "64", "visibility", "30"),
		"redelivered after the visibility timeout (3s)")
}
