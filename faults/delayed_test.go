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

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// runMoverChild subscribes to RELAY_FAULTS_TOPIC with RELAY_FAULTS_URL, so
// that its subscriber runs the topic's mover of delayed messages, and
// acks what it receives, printing "GOT <n>" after each delivery, until it
// is killed.
func runMoverChild() int {
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
	n := 0
	for m := range ch {
		_ = m.Ack()
		n++
		fmt.Printf("GOT %d\n", n)
	}
	fmt.Fprintln(os.Stderr, "child: subscription ended")
	return 1
}

// delayedKill publishes moverTotal messages due 2s to 6s later, starts a
// child process whose subscription runs the topic's mover, kills it with
// SIGKILL once it has received a third of them (the rest waiting in the
// broker and, for Kafka, some in the mover's memory), then subscribes
// with a new group in this process: that group must receive every message
// (the ones moved before the kill from the topic, the others through this
// process's mover), none before its due time. Duplicates count moves
// repeated after the crash.
const moverTotal = 600

func delayedKill(t *testing.T, topic, adapter, pubURL, childURL, parentURL, how string) Result {
	start := time.Now()
	l := newLedger()

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=delaymover", "RELAY_FAULTS_URL="+childURL, "RELAY_FAULTS_TOPIC="+topic)
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
	got := make(chan int, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, ok := strings.CutPrefix(sc.Text(), "GOT "); ok {
				k, _ := strconv.Atoi(n)
				select {
				case got <- k:
				default:
				}
			}
		}
		close(got)
	}()

	pub := openPub(t, pubURL)
	due := map[string]time.Time{}
	publishAt := time.Now().Add(time.Second) // the child's subscription is up by then
	time.Sleep(time.Until(publishAt))
	ctx := context.Background()
	for i := 0; i < moverTotal; i += 50 {
		batch := batchOf(50, 64, adapter)
		for j, m := range batch {
			m.DeliverAt = publishAt.Add(2*time.Second + time.Duration(i+j)*4*time.Second/moverTotal)
			due[m.ID] = m.DeliverAt
		}
		if err := pub.Publish(ctx, topic, batch...); err != nil {
			t.Fatal(err)
		}
		l.expect(batch)
	}
	deadline := time.After(60 * time.Second)
	for k := 0; k < moverTotal/3; {
		select {
		case n, ok := <-got:
			if !ok {
				t.Fatal("child exited before receiving a third of the delayed messages")
			}
			k = n
		case <-deadline:
			t.Fatal("child did not receive a third of the delayed messages within 60s")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	t.Logf("child killed %v after publishing", time.Since(publishAt).Round(time.Millisecond))

	sub := openSub(t, parentURL)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(cctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	early := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range ch {
			if d, ok := due[m.ID]; ok && time.Until(d) > 2*time.Millisecond {
				mu.Lock()
				early++
				mu.Unlock()
			}
			l.receive(m.ID)
			_ = m.Ack()
		}
	}()
	l.waitAll(60 * time.Second)
	time.Sleep(time.Second) // late duplicates
	cancel()
	_ = sub.Close()
	wg.Wait()
	if early > 0 {
		t.Errorf("%d delayed messages delivered before their due time", early)
	}
	r := l.result(t, "delayed mover SIGKILL", adapter, fmt.Sprintf("%d due in 2-6s; mover's process killed after delivering a third; %s", moverTotal, how))
	record(t, r, start)
	return r
}

func TestKillDelayedRedis(t *testing.T) {
	base := redisURL(t)
	opts, err := redis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(opts)
	defer raw.Close()
	topic := unique("faults-delay")
	defer raw.Del(context.Background(), topic, topic+redisstream.DelayedSuffix)
	r := delayedKill(t, topic, "redisstream", base,
		testenv.WithParams(base, "group", unique("g"), "delay_poll", "50ms"),
		testenv.WithParams(base, "group", unique("g"), "delay_poll", "50ms"),
		"moves are atomic Lua scripts: no duplicate allowed")
	if r.Dups != 0 {
		t.Errorf("%d duplicates: a Redis move is atomic and must not repeat", r.Dups)
	}
}

func TestKillDelayedKafka(t *testing.T) {
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
	opts := []string{"session_timeout", "2s", "heartbeat_interval", "200ms"}
	delayedKill(t, unique("faults-delay"), "kafka (kfake)", base,
		testenv.WithParams(base, append(opts, "group", unique("g"))...),
		testenv.WithParams(base, append(opts, "group", unique("g"))...),
		"mover group rebalances after session_timeout=2s; moves not committed are repeated (duplicates allowed)")
}
