package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestRestart: PostgreSQL stopped under a live publisher and subscriber.
// A publish started during the outage succeeds once the server is back,
// the publisher reports unhealthy meanwhile, and the subscription — with
// polling practically off — gets the message: its LISTEN connection came
// back and woke it.
func TestRestart(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("restart"), relaytest.Unique("g")
	pub := openPub(t)
	sub := openSub(t, group, "poll", "1h")
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	before := relay.NewMessage([]byte("before"))
	if err := pub.Publish(ctx, topic, before); err != nil {
		t.Fatal(err)
	}
	if got := next(t, ch); got.ID != before.ID {
		t.Fatalf("got %q, want %q", got.ID, before.ID)
	} else if err := got.Ack(); err != nil {
		t.Fatal(err)
	}

	local.Stop(t)
	during := relay.NewMessage([]byte("published during the outage"))
	done := make(chan error, 1)
	go func() {
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		done <- pub.Publish(pctx, topic, during)
	}()
	waitFor(t, "unhealthy publisher", func() bool { return pub.(relay.HealthChecker).Health() != nil })
	waitFor(t, "unhealthy subscriber", func() bool { return sub.(relay.HealthChecker).Health() != nil })
	local.Start(t)
	if err := <-done; err != nil {
		t.Fatalf("publish during the outage: %v", err)
	}
	got := next(t, ch)
	if got.ID != during.ID {
		t.Fatalf("got %q, want %q", got.ID, during.ID)
	}
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "healthy publisher and subscriber", func() bool {
		return pub.(relay.HealthChecker).Health() == nil && sub.(relay.HealthChecker).Health() == nil
	})
}
