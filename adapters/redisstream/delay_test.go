package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// NackAfter is native: the entry waits in the group, held by the
// hand-back consumer with an idle time that makes it claimable only after
// the delay, so the delay holds when the subscriber closes (or its process
// exits), and a new subscriber gets it only once the delay has passed.
func TestNackAfterHoldsAcrossSubscriptions(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("delay"), relaytest.Unique("g")
	raw := rawClient(t)
	pub := openPub(t)
	sub1 := openSub(t, group, "claim_idle", "10s", "claim_every", "50ms")
	if c := sub1.(relay.CapabilityReporter).Capabilities(); !c.NativeDelay || c.MaxDelay != 10*time.Second {
		t.Fatalf("capabilities: NativeDelay %v MaxDelay %v, want true 10s", c.NativeDelay, c.MaxDelay)
	}
	provision(t, sub1, topic)
	msg := relay.NewMessage([]byte("later"))
	relaytest.Publish(t, pub, topic, msg)
	ch1, _ := relaytest.Subscribe(t, sub1, topic)
	m := relaytest.Next(t, ch1, "first delivery")
	const delay = 2 * time.Second
	nacked := time.Now() // the delay runs from a moment after this
	if err := m.NackAfter(delay); err != nil {
		t.Fatal(err)
	}
	if err := sub1.Close(); err != nil {
		t.Fatal(err)
	}
	for range ch1 {
		t.Fatal("delivery after the nack")
	}
	// The closed channel means the hand-back reached Redis: the entry waits
	// with the hand-back consumer, not with any reading consumer.
	p, err := raw.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: topic, Group: group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(p) != 1 || p[0].Consumer != redisstream.HandbackConsumer {
		t.Fatalf("pending entries %+v, %v; want one held by %s", p, err, redisstream.HandbackConsumer)
	}

	sub2 := openSub(t, group, "claim_idle", "10s", "claim_every", "50ms")
	ch2, _ := relaytest.Subscribe(t, sub2, topic)
	m2 := relaytest.Next(t, ch2, "delivery after the delay")
	if waited := time.Since(nacked); waited < delay {
		t.Errorf("redelivered after %v, before the %v delay", waited, delay)
	}
	if m2.ID != msg.ID || m2.Attempt() != 2 {
		t.Errorf("got %s attempt %d, want %s attempt 2", m2.ID, m2.Attempt(), msg.ID)
	}
	if err := m2.Ack(); err != nil {
		t.Fatal(err)
	}
	_ = sub2.Close()
	if n := pendingCount(t, raw, topic, group); n != 0 {
		t.Errorf("%d entries still pending", n)
	}
}

// A message waiting out a NackAfter delay holds no slot of the in-flight
// window: with inflight=N, N other messages are delivered and held
// meanwhile. The waiting subscription claims the message when it is due,
// not at its next claim_every (one hour here).
func TestNackAfterFreesWindowSlot(t *testing.T) {
	const n = 3
	topic, group := relaytest.Unique("delay-window"), relaytest.Unique("g")
	pub := openPub(t)
	sub := openSub(t, group, "inflight", "3", "claim_idle", "1m", "claim_every", "1h")
	provision(t, sub, topic)
	waiting := relay.NewMessage([]byte("waits"))
	relaytest.Publish(t, pub, topic, waiting)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	m := relaytest.Next(t, ch, "message to delay")
	const delay = 5 * time.Second
	if err := m.NackAfter(delay); err != nil {
		t.Fatal(err)
	}
	others := newMsgs(n, "other %d")
	relaytest.Publish(t, pub, topic, others...)
	var held []*relay.Message
	for i := range others {
		m := relaytest.Next(t, ch, "other message while one waits")
		if m.ID != others[i].ID {
			t.Fatalf("got %s, want %s", m.ID, others[i].ID)
		}
		held = append(held, m) // all n held unsettled at once
	}
	// Had the waiting message kept a slot, the last of the others could
	// not have come while it waited: the waiting message itself would
	// have come back first, and the ID check above would have failed.
	for _, m := range held {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	back := relaytest.Next(t, ch, "delayed message, when due")
	if back.ID != waiting.ID || back.Attempt() != 2 {
		t.Errorf("got %s attempt %d, want %s attempt 2", back.ID, back.Attempt(), waiting.ID)
	}
	_ = back.Ack()
}

// A NackAfter longer than claim_idle (MaxDelay) is emulated by the shared
// layer, which keeps the entry leased; it still holds no slot of the
// window: with inflight=3, three other messages are delivered and held
// while it waits.
func TestEmulatedNackAfterFreesReadAhead(t *testing.T) {
	const n = 3
	topic, group := relaytest.Unique("delay-emulated"), relaytest.Unique("g")
	pub := openPub(t)
	sub := openSub(t, group, "inflight", "3", "claim_idle", "300ms", "claim_every", "50ms")
	provision(t, sub, topic)
	waiting := relay.NewMessage([]byte("waits"))
	relaytest.Publish(t, pub, topic, waiting)
	ch, cancel := relaytest.Subscribe(t, sub, topic)
	m := relaytest.Next(t, ch, "message to delay")
	const delay = 10 * time.Second // beyond MaxDelay (300ms): emulated
	if err := m.NackAfter(delay); err != nil {
		t.Fatal(err)
	}
	others := newMsgs(n, "other %d")
	relaytest.Publish(t, pub, topic, others...)
	var held []*relay.Message
	for i := range others {
		m := relaytest.Next(t, ch, "other message while one waits")
		if m.ID != others[i].ID {
			t.Fatalf("got %s, want %s", m.ID, others[i].ID)
		}
		held = append(held, m)
	}
	for _, m := range held {
		_ = m.Ack()
	}
	cancel() // emulated: ending the subscription releases the waiting message at once
	for range ch {
	}
	ch2, _ := relaytest.Subscribe(t, sub, topic)
	if back := relaytest.Next(t, ch2, "released message"); back.ID != waiting.ID {
		t.Errorf("got %s, want %s", back.ID, waiting.ID)
	} else {
		_ = back.Ack()
	}
}
