package postgres_test

import (
	"context"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestCallerPool: NewPublisher and NewSubscriber work through a pool the
// caller owns, and closing them leaves the pool usable.
func TestCallerPool(t *testing.T) {
	ctx := context.Background()
	pool := rawPool(t)
	pub, err := postgres.NewPublisher(ctx, pool, postgres.PublisherConfig{Schema: testSchema})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := postgres.NewSubscriber(ctx, pool, postgres.SubscriberConfig{Schema: testSchema, Group: relaytest.Unique("g")})
	if err != nil {
		t.Fatal(err)
	}
	topic := relaytest.Unique("owned")
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage([]byte("through the caller's pool"))
	if err := pub.Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	if got := next(t, ch); got.ID != m.ID {
		t.Fatalf("got %q, want %q", got.ID, m.ID)
	} else if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("the caller's pool after Close: %v", err)
	}
}
