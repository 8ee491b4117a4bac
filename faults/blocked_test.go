//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// blockedFor is how long the broker's memory alarm blocks publishers.
const blockedFor = 15 * time.Second

// TestNetworkAMQPBlocked raises RabbitMQ's memory alarm mid-stream, so
// that the broker blocks publishing connections (connection.blocked), for
// blockedFor: each Publish during it returns with its ctx and an error
// saying the broker blocked publishing, the publisher's Health says why,
// and once the alarm clears the batch published into it and everything
// after it arrives, nothing lost.
func TestNetworkAMQPBlocked(t *testing.T) {
	if _, err := exec.LookPath("rabbitmqctl"); err != nil || os.Getenv("RELAY_TEST_AMQP_URL") != "" {
		t.Fatalf("the blocked-broker scenario raises the local RabbitMQ's memory alarm with rabbitmqctl (found: %v; RELAY_TEST_AMQP_URL=%q)",
			err, relay.Redact(os.Getenv("RELAY_TEST_AMQP_URL")))
	}
	noLeaks(t)
	start := time.Now()
	u := testenv.WithParams(amqpURL(t), "heartbeat", "2s")
	unlock := testenv.LockForRestart(t, "amqp") // nobody else publishes to the alarmed broker
	defer unlock()
	nt := netTarget{adapter: "amqp", pub: u, sub: testenv.WithParams(u, "group", unique("g"), "inflight", "64")}
	s := openStream(t, nt, "faults-blocked")
	publishAll(t, s.l, s.pub, s.topic, batchOf(50, 64, "before"), 10, nil)
	s.l.waitAll(time.Minute)

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
	alarmed := time.Now()

	// One batch published into the alarm, each attempt bounded by 2 s,
	// retried until the broker takes it again.
	during := batchOf(10, 64, "during")
	s.l.expect(during)
	var lastErr, wrongErr error
	attempts := 0
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for time.Since(alarmed) < blockedFor+2*time.Minute {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := s.pub.Publish(ctx, s.topic, during...)
			cancel()
			if err == nil {
				return
			}
			attempts++
			lastErr = err
			if wrongErr == nil && !errors.Is(err, context.DeadlineExceeded) {
				wrongErr = err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	health := s.pub.(relay.HealthChecker)
	var detect time.Duration
	var unhealthy error
	for time.Since(alarmed) < blockedFor {
		if err := health.Health(); err != nil {
			detect, unhealthy = time.Since(alarmed), err
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Until(alarmed.Add(blockedFor)))
	watermark(restore)
	cleared := time.Now()
	<-pubDone
	waitFor(t, "the publisher to be healthy again", time.Minute, func() bool { return health.Health() == nil })
	recovered := time.Since(cleared)
	s.l.waitAll(time.Minute)
	publishAll(t, s.l, s.pub, s.topic, batchOf(50, 64, "after"), 10, nil)

	r := s.finish("broker blocks publishers", fmt.Sprintf(
		"RabbitMQ memory alarm (connection.blocked) for %v; %d Publish attempts of 2s returned with the context's error", blockedFor, attempts), time.Minute)
	if unhealthy != nil {
		r.DetectSeconds = seconds(detect)
	}
	r.RecoverSeconds = seconds(recovered)
	switch {
	case attempts == 0:
		t.Errorf("a Publish during the memory alarm succeeded")
	case wrongErr != nil:
		t.Errorf("Publish during the alarm: want an error wrapping context.DeadlineExceeded, got %v", wrongErr)
	case !strings.Contains(lastErr.Error(), "blocked"):
		t.Errorf("Publish during the alarm failed with %q, which does not say the broker blocked publishing", lastErr)
	}
	if unhealthy == nil {
		t.Errorf("the publisher's Health stayed nil through %v of memory alarm", blockedFor)
	} else if !strings.Contains(unhealthy.Error(), "blocked") {
		t.Errorf("Health during the alarm = %q; want it to say the broker blocked publishing", unhealthy)
	} else {
		t.Logf("unhealthy after %v: %v", detect, unhealthy)
	}
	record(t, r, start)
}
