package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestExpiredLeaseTakenOver: a row claimed by a consumer that died (its
// lease ran out) is claimed by a live subscription, with the attempt the
// database counted.
func TestExpiredLeaseTakenOver(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("lease"), relaytest.Unique("g")
	sub := openSub(t, group)
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage([]byte("claimed by the dead"))
	if err := openPub(t).Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	// A consumer claims it and dies: its lease has just run out.
	if _, err := rawPool(t).Exec(ctx, "UPDATE "+table("deliveries")+
		" SET attempts = attempts + 1, lease_holder = 'dead', visible_at = now() - interval '1 second' WHERE topic = $1", topic); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := next(t, ch)
	if got.ID != m.ID || got.Attempt() != 2 {
		t.Fatalf("got %q attempt %d, want %q attempt 2", got.ID, got.Attempt(), m.ID)
	}
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseExtended: see relaytest.LeaseExtended.
func TestLeaseExtended(t *testing.T) {
	const lease = 600 * time.Millisecond
	group := relaytest.Unique("g")
	relaytest.LeaseExtended(t, openPub(t), openSub(t, group, "lease", lease.String()),
		openSub(t, group, "lease", lease.String(), "poll", "50ms"), relaytest.Unique("extend"), lease)
}
