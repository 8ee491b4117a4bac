package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// waitHealth polls h until its answer is what want says (nil or not),
// failing t after limit.
func waitHealth(t *testing.T, h relay.HealthChecker, healthy bool, limit time.Duration) error {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := h.Health()
		if (err == nil) == healthy {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscriber Health after %v: %v, want healthy=%v", limit, err, healthy)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestListenKeepalive checks the LISTEN connection's keepalive: on a
// network that silently drops everything (connections kept open, no
// reset) the subscriber's Health turns non-nil, saying the ping went
// unanswered, and it is nil again once the network is back.
func TestListenKeepalive(t *testing.T) {
	proxied, proxy := testenv.ProxyURL(t, pgURL(t))
	sub, err := relay.OpenSubscriber(context.Background(),
		testenv.WithParams(proxied, "group", "g-keepalive", "ping_interval", "300ms"))
	if err != nil {
		t.Fatal(err)
	}
	h := sub.(relay.HealthChecker)
	waitHealth(t, h, true, 30*time.Second) // the LISTEN connection is up
	time.Sleep(time.Second)                // idle: a few pings go through and are answered
	if err := h.Health(); err != nil {
		t.Fatalf("Health on an idle, answering connection: %v", err)
	}

	proxy.Hang()
	err = waitHealth(t, h, false, 30*time.Second)
	if !strings.Contains(err.Error(), "keepalive ping unanswered") && !strings.Contains(err.Error(), "LISTEN connection") {
		t.Errorf("Health on a silent network = %q; want it to name the LISTEN connection's keepalive", err)
	}
	t.Logf("silent network reported: %v", err)

	proxy.Restore()
	waitHealth(t, h, true, 60*time.Second)
	if err := sub.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
