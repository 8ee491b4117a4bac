package redisstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// Lag is the group's undelivered plus pending entries, under RESP3 (the
// URL's default) and RESP2.
func TestLag(t *testing.T) {
	for _, proto := range []int{3, 2} {
		t.Run(map[int]string{2: "resp2", 3: "resp3"}[proto], func(t *testing.T) {
			opts, err := redis.ParseURL(redisURL(t))
			if err != nil {
				t.Fatal(err)
			}
			opts.Protocol = proto
			c := redis.NewClient(opts)
			defer c.Close()
			const prefix = "lagtest:"
			sub, err := redisstream.NewSubscriber(context.Background(), c, redisstream.SubscriberConfig{Group: relaytest.Unique("g"), Prefix: prefix, InFlight: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			pub := openPub(t, "prefix", prefix)
			lr := relaytest.LagOf(t, sub)

			const n, k = 10, 3
			topic := relaytest.Unique("lag")
			relaytest.WaitLag(t, lr, topic, 0) // no stream yet
			provision(t, sub, topic)
			relaytest.Publish(t, pub, topic, newMsgs(n, "m%d")...)
			relaytest.WaitLag(t, lr, topic, n)

			ch, _ := relaytest.Subscribe(t, sub, topic)
			var held []*relay.Message
			for i := 0; i < k+1; i++ {
				held = append(held, relaytest.Next(t, ch, "message"))
			}
			relaytest.WaitLag(t, lr, topic, n) // delivered, unacked entries are pending
			for _, m := range held[:k] {
				if err := m.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			relaytest.WaitLag(t, lr, topic, n-k)
			if err := held[k].Nack(); err != nil { // handed back: still pending
				t.Fatal(err)
			}
			relaytest.WaitLag(t, lr, topic, n-k)
		})
	}
}

// A group that does not exist yet counts what it would receive when
// created at its start position: the whole stream for "0", nothing for "$".
func TestLagOfMissingGroup(t *testing.T) {
	topic := relaytest.Unique("lag-nogroup")
	relaytest.Publish(t, openPub(t), topic, newMsgs(5, "m%d")...)
	relaytest.WaitLag(t, relaytest.LagOf(t, openSub(t, relaytest.Unique("g"))), topic, 5)
	relaytest.WaitLag(t, relaytest.LagOf(t, openSub(t, relaytest.Unique("g"), "start", "$")), topic, 0)
}

// When Redis cannot compute the lag (an unread entry was deleted), Lag
// says so instead of returning a count, and recovers once the group has
// read past the gap.
func TestLagUnknownAfterXDel(t *testing.T) {
	topic := relaytest.Unique("lag-xdel")
	raw := rawClient(t)
	sub := openSub(t, relaytest.Unique("g"))
	provision(t, sub, topic)
	relaytest.Publish(t, openPub(t), topic, newMsgs(5, "m%d")...)
	lr := relaytest.LagOf(t, sub)
	relaytest.WaitLag(t, lr, topic, 5)
	ctx := context.Background()
	entries, err := raw.XRange(ctx, topic, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.XDel(ctx, topic, entries[2].ID).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = lr.Lag(ctx, topic)
	if err == nil || errors.Is(err, relay.ErrNotSupported) || !strings.Contains(err.Error(), "deleted or trimmed") {
		t.Fatalf("Lag after XDEL of an unread entry: %v, want an error saying Redis cannot tell", err)
	}
	ch, _ := relaytest.Subscribe(t, sub, topic)
	for i := 0; i < 4; i++ {
		if err := relaytest.Next(t, ch, "message").Ack(); err != nil {
			t.Fatal(err)
		}
	}
	relaytest.WaitLag(t, lr, topic, 0)
}
