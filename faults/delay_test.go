//go:build faults

package faults

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The delayed-delivery SIGKILL scenario: delayedTotal messages published
// with DeliverAt, delayedSoon of them due 1s after publishing and the rest
// 4-6s after. A child process subscribes in the group while none is due,
// takes the soon ones when due and holds them unacked (on NATS it also
// holds the later ones back with NakWithDelay: the subscription does the
// delaying there), and is SIGKILLed before the later ones are due. A
// second subscriber of the group, started after the kill, must receive
// every message, none before its DeliverAt.
const (
	delayedTotal = 300
	delayedSoon  = 100
	// delayEarlyTolerance: clock reads on one machine rounding to the
	// millisecond (as drivertest allows).
	delayEarlyTolerance = 2 * time.Millisecond
	dueKey              = "faults-due"
)

// runDelayChild is child mode "delay": it subscribes to RELAY_FAULTS_TOPIC
// with RELAY_FAULTS_URL, prints "SUBSCRIBED", holds what it receives
// unsettled, prints "EARLY <id>" for a message received before the due
// time in its metadata and "HOLDING n" once it holds RELAY_FAULTS_HOLD
// messages, and waits to be killed.
func runDelayChild() int {
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
	fmt.Println("SUBSCRIBED")
	var held []*relay.Message
	for m := range ch {
		if early(m, time.Now()) {
			fmt.Printf("EARLY %s\n", m.ID)
		}
		held = append(held, m) // never settled
		if len(held) == want {
			fmt.Printf("HOLDING %d\n", len(held))
		}
	}
	fmt.Fprintln(os.Stderr, "child: subscription ended")
	return 1
}

// early tells whether m, received at at, came before the due time its
// publisher wrote into its metadata.
func early(m *relay.Message, at time.Time) bool {
	due, err := time.Parse(time.RFC3339Nano, m.Metadata[dueKey])
	return err == nil && due.Sub(at) > delayEarlyTolerance
}

func delayedKillScenario(t *testing.T, adapter, pubURL, subURL, how string) string {
	start := time.Now()
	topic := unique("faults-delay")
	l := newLedger()
	// Provision the group with a subscriber that then closes: nobody of the
	// group runs until the child.
	pre := openSub(t, subURL)
	provision(t, pre, topic)
	_ = pre.Close()

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=delay", "RELAY_FAULTS_URL="+subURL,
		"RELAY_FAULTS_TOPIC="+topic, "RELAY_FAULTS_HOLD="+strconv.Itoa(delayedSoon))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	subscribed, holding := make(chan struct{}), make(chan string, 1)
	var childEarly atomic.Int32
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "SUBSCRIBED":
				close(subscribed)
			case strings.HasPrefix(line, "HOLDING"):
				holding <- line
			case strings.HasPrefix(line, "EARLY"):
				childEarly.Add(1)
				t.Errorf("child: %s", line)
			}
		}
		close(holding)
	}()
	select {
	case <-subscribed:
	case <-time.After(60 * time.Second):
		t.Fatal("child did not subscribe within 60s")
	}

	pub := openPub(t, pubURL)
	now := time.Now()
	var msgs []*relay.Message
	for i := range delayedTotal {
		due := now.Add(time.Second + time.Duration(i)*500*time.Millisecond/delayedSoon)
		if i >= delayedSoon {
			due = now.Add(4*time.Second + time.Duration(i-delayedSoon)*2*time.Second/(delayedTotal-delayedSoon))
		}
		m := relay.NewMessage(fmt.Appendf(nil, "%s-%d", adapter, i))
		m.DeliverAt = due
		m.Metadata = relay.Metadata{dueKey: due.Format(time.RFC3339Nano)}
		msgs = append(msgs, m)
	}
	publishAll(t, l, pub, topic, msgs, 50, nil)
	if d := time.Since(now); d > time.Second {
		t.Fatalf("publishing took %v, past the first due time: the scenario needs the messages published before they are due", d)
	}

	select {
	case line, ok := <-holding:
		if !ok {
			t.Fatal("child exited before holding its messages")
		}
		t.Logf("child %d: %s", cmd.Process.Pid, line)
	case <-time.After(60 * time.Second):
		t.Fatal("child did not report holding the messages due first within 60s")
	}
	if until := time.Until(now.Add(4 * time.Second)); until < 500*time.Millisecond {
		t.Fatalf("the child took its messages %v before the later ones are due: too late to kill it before them", until)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	killedAt := time.Now()

	member := openSub(t, subURL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := member.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var memberEarly atomic.Int32
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range ch {
			if early(m, time.Now()) {
				memberEarly.Add(1)
				t.Errorf("%s delivered %v before its DeliverAt", m.ID, m.Metadata[dueKey])
			}
			l.receive(m.ID)
			_ = m.Ack()
		}
	}()
	l.waitAll(90 * time.Second)
	cancel()
	_ = member.Close()
	wg.Wait()
	r := l.result(t, "delayed delivery, holder SIGKILL", adapter,
		fmt.Sprintf("child held %d due (unacked) of %d delayed, killed %.1fs before the other %d were due; %d early; %s",
			delayedSoon, delayedTotal, now.Add(4*time.Second).Sub(killedAt).Seconds(), delayedTotal-delayedSoon,
			childEarly.Load()+memberEarly.Load(), how))
	record(t, r, start)
	return topic
}

func TestDelayedKillPostgres(t *testing.T) {
	base := pgURL(t)
	group := unique("g")
	delayedKillScenario(t, "postgres", base,
		testenv.WithParams(base, "group", group, "inflight", "200", "lease", "2s"),
		"rows with visible_at = DeliverAt; the held ones claimed again after lease=2s")
}

func TestDelayedKillRabbitMQ(t *testing.T) {
	base := amqpURL(t)
	group := unique("g")
	topic := delayedKillScenario(t, "amqp", base,
		testenv.WithParams(base, "group", group, "inflight", "200"),
		"due queues hold them; the held ones requeued on connection loss")
	// The scenario's topology stays on the shared broker unless deleted.
	conn, err := amqp091.Dial(base)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	_, _ = ch.QueueDelete(topic+"."+group, false, false, false)
	dx, dqs := amqp.DueTopology(topic)
	for _, q := range dqs {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(dx, false, false)
	_ = ch.ExchangeDelete(topic, false, false)
}

func TestDelayedKillNATS(t *testing.T) {
	base := testenv.NATS(t)
	withNATSCleanup(t, base, "faults-delay")
	delayedKillScenario(t, "nats", base,
		testenv.WithParams(base, "group", unique("g"), "inflight", "200", "ack_wait", "2s"),
		"the child's NakWithDelay holds the later ones in the server; the held ones redelivered after ack_wait=2s")
}
