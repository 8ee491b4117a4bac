package main

import (
	"context"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	relaynats "github.com/go-relay/relay/adapters/nats"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// natsBackend is the shared NATS JetStream server. The largest payload is
// 512 KiB: nats-server's max_payload (1 MiB) counts the headers too.
// The streams of bridgePair's topics (e2e-in-*, e2e-out-*) created while
// the test ran are deleted when it ends.
func natsBackend(t *testing.T) backend {
	u := testenv.NATS(t)
	nc, err := natsgo.Connect(u)
	if err != nil {
		t.Fatalf("nats: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		t.Fatalf("nats: %v", err)
	}
	before := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for n := range js.StreamNames(ctx).Name() {
		before[n] = true
	}
	t.Cleanup(func() {
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var drop []string
		for n := range js.StreamNames(ctx).Name() {
			if !before[n] && (strings.HasPrefix(n, relaynats.StreamName("e2e-in-")) || strings.HasPrefix(n, relaynats.StreamName("e2e-out-"))) {
				drop = append(drop, n)
			}
		}
		for _, n := range drop {
			_ = js.DeleteStream(ctx, n)
		}
	})
	return backend{name: "nats", pubURL: u, large: 512 << 10,
		subURL: func(g string) string { return testenv.WithParams(u, "group", g, "ack_wait", "5s") }}
}

// TestBridgeNATS bridges NATS JetStream to Kafka and Redis Streams to
// NATS with the relay binary: every test message arrives once with its
// ID, Key, metadata and payload intact.
func TestBridgeNATS(t *testing.T) {
	holdBrokers(t)
	n, k, r := natsBackend(t), kafkaBackend(t), redisBackend(t)
	t.Run("nats-to-kafka", func(t *testing.T) { bridgePair(t, n, k) })
	t.Run("redis-to-nats", func(t *testing.T) { bridgePair(t, r, n) })
}
