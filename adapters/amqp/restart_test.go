package amqp_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// A broker restart in the middle of a stream of publishes and consumes:
// nothing confirmed is lost, publishes wait for the reconnect instead of
// failing, consumption resumes, and the state changes are observable.
func TestRestartDuringStream(t *testing.T) {
	if why := canRestart(t); why != "" {
		t.Skipf("SKIP: %s", why)
	}
	c := newCleaner(t)
	topic, group := unique("restart"), unique("g")

	var stMu sync.Mutex
	var states []amqp.State
	cfg := parse(t, brokerURL(t))
	cfg.OnStateChange = func(s amqp.State) {
		stMu.Lock()
		states = append(states, s)
		stMu.Unlock()
	}
	pub := openPubCfg(t, cfg)
	sub := openSub(t, c, group, "inflight", "16")
	relaytest.Provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)

	var mu sync.Mutex
	received := map[string]int{}
	consumed := make(chan struct{}, 1)
	var cwg sync.WaitGroup
	cwg.Add(1)
	go func() {
		defer cwg.Done()
		for m := range ch {
			mu.Lock()
			received[m.ID]++
			mu.Unlock()
			_ = m.Ack()
			select {
			case consumed <- struct{}{}:
			default:
			}
		}
	}()

	var published []string
	var pubErrs []error
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			batch := make([]*relay.Message, 5)
			for j := range batch {
				batch[j] = relay.NewMessage([]byte(fmt.Sprintf("m %d.%d", i, j)))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			err := pub.Publish(ctx, topic, batch...)
			cancel()
			if err != nil {
				pubErrs = append(pubErrs, err)
				return
			}
			for _, m := range batch {
				published = append(published, m.ID)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	<-consumed
	time.Sleep(300 * time.Millisecond)
	stopBroker(t)
	time.Sleep(time.Second)
	startBroker(t)
	// Consumption must resume: wait for a delivery after the restart.
	for len(consumed) > 0 {
		<-consumed
	}
	select {
	case <-consumed:
	case <-time.After(60 * time.Second):
		t.Fatal("no message consumed within 60s after the restart")
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	pwg.Wait()
	for _, err := range pubErrs {
		t.Errorf("Publish failed across the restart: %v", err)
	}

	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		missing := 0
		for _, id := range published {
			if received[id] == 0 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d published messages never arrived", missing, len(published))
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = sub.Close()
	cwg.Wait()
	dups := 0
	for _, n := range received {
		dups += n - 1
	}
	stMu.Lock()
	defer stMu.Unlock()
	sawReconnect := false
	for i, s := range states {
		if s == amqp.StateReconnecting && i+1 < len(states) && states[i+1] == amqp.StateConnected {
			sawReconnect = true
		}
	}
	if !sawReconnect {
		t.Errorf("state changes %v do not show reconnecting → connected", states)
	}
	t.Logf("%d messages published across a broker restart, all received (%d duplicate deliveries); states %v", len(published), dups, states)
}

// A broker resource alarm blocks publishing connections. Publish then
// returns when its ctx ends, saying why, instead of hanging in a socket
// write; once the alarm clears, publishing goes on.
func TestPublishWhileBlocked(t *testing.T) {
	if why := canRestart(t); why != "" || os.Getenv("RELAY_TEST_AMQP_STOP") != "" {
		t.Skipf("SKIP: needs the local broker and rabbitmqctl (%s)", why)
	}
	c := newCleaner(t)
	topic := unique("blocked")
	sub := openSub(t, c, unique("g"))
	relaytest.Provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	pub := openPub(t)
	relaytest.Publish(t, pub, topic, relay.NewMessage([]byte("before")))
	_ = relaytest.Next(t, ch, "before the alarm").Ack()

	unlock := testenv.LockForRestart(t, "amqp")
	defer unlock()
	watermark := func(v string) {
		if out, err := exec.Command("rabbitmqctl", "set_vm_memory_high_watermark", v).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl set_vm_memory_high_watermark %s: %v: %s", v, err, out)
		}
	}
	restore := os.Getenv("RELAY_TEST_AMQP_WATERMARK")
	if restore == "" {
		restore = "0.4"
	}
	t.Cleanup(func() { watermark(restore) })
	watermark("0.00001")

	// The first publish after the alarm is written but not confirmed; the
	// broker then tells the connection it is blocked, and later publishes
	// wait for the unblock within their ctx.
	var lastErr error
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		lastErr = pub.Publish(ctx, topic, relay.NewMessage([]byte("during")))
		cancel()
		if lastErr == nil {
			t.Fatalf("publish %d during a memory alarm succeeded", i)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("publish %d during the alarm took %v with a 2s ctx", i, took)
		}
	}
	if !strings.Contains(lastErr.Error(), "blocked") {
		t.Errorf("error during the alarm %q does not say the broker blocked publishing", lastErr)
	}
	if err := pub.Health(); err == nil || !strings.Contains(err.Error(), "blocked publishing") {
		t.Errorf("publisher Health during the alarm = %v; want it to say the broker blocked publishing", err)
	}
	watermark(restore)
	after := relay.NewMessage([]byte("after"))
	relaytest.Publish(t, pub, topic, after)
	if err := pub.Health(); err != nil {
		t.Errorf("publisher Health after the alarm cleared: %v", err)
	}
	for {
		m := relaytest.Next(t, ch, "after the alarm")
		_ = m.Ack()
		if m.ID == after.ID {
			break
		}
	}
}
