package redisstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// cleanupKeys deletes the stream of topic and its delayed set at the end of t.
func cleanupKeys(t *testing.T, raw *redis.Client, topic string) {
	t.Cleanup(func() { raw.Del(context.Background(), topic, topic+redisstream.DelayedSuffix) })
}

// A delayed message waits in the sorted set beside the stream, scored by
// its due time in ms rounded up, not in the stream; a subscription moves
// it when due, byte-exact (key, metadata, a payload with the member's
// framing characters), and removes it from the set. Once the subscription
// ends, nothing moves any more.
func TestDelayedWaitsInSortedSet(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("delayset"), relaytest.Unique("g")
	raw := rawClient(t)
	cleanupKeys(t, raw, topic)
	pub := openPub(t)
	sub := openSub(t, group, "delay_poll", "20ms")
	provision(t, sub, topic)

	payload := []byte("a|b:3:c\x00\xff|")
	m := &relay.Message{ID: relay.NewID(), Key: "k|1", Payload: payload,
		Metadata: relay.Metadata{"trace": "x:y", "z": ""}, DeliverAt: time.Now().Add(1500*time.Millisecond + 300*time.Microsecond)}
	relaytest.Publish(t, pub, topic, m)

	if n := raw.XLen(ctx, topic).Val(); n != 0 {
		t.Fatalf("stream holds %d entries before the message is due, want 0", n)
	}
	zs, err := raw.ZRangeWithScores(ctx, topic+redisstream.DelayedSuffix, 0, -1).Result()
	if err != nil || len(zs) != 1 {
		t.Fatalf("delayed set: %v, %v; want one member", zs, err)
	}
	wantScore := math.Ceil(float64(m.DeliverAt.UnixNano()) / 1e6)
	if zs[0].Score != wantScore {
		t.Errorf("score %v, want %v (due time in ms, rounded up)", zs[0].Score, wantScore)
	}
	if member := zs[0].Member.(string); !strings.Contains(member, m.ID) || !bytes.Contains([]byte(member), payload) {
		t.Errorf("member %q does not carry the entry's fields", member)
	}

	ch, cancel := relaytest.Subscribe(t, sub, topic)
	got := relaytest.Next(t, ch, "the delayed message")
	if early := time.Until(m.DeliverAt); early > 2*time.Millisecond {
		t.Errorf("delivered %v early", early)
	}
	if got.ID != m.ID || got.Key != m.Key || !bytes.Equal(got.Payload, payload) || len(got.Metadata) != 2 ||
		got.Metadata["trace"] != "x:y" || got.Metadata["z"] != "" || !got.DeliverAt.IsZero() {
		t.Errorf("got %s key %q payload %q metadata %v DeliverAt %v, want %s %q %q %v zero",
			got.ID, got.Key, got.Payload, got.Metadata, got.DeliverAt, m.ID, m.Key, payload, m.Metadata)
	}
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
	if n := raw.ZCard(ctx, topic+redisstream.DelayedSuffix).Val(); n != 0 {
		t.Errorf("delayed set holds %d members after the move, want 0", n)
	}

	cancel()
	for range ch {
	}
	late := relay.NewMessage([]byte("nobody moves me")).DeliverAfter(50 * time.Millisecond)
	relaytest.Publish(t, pub, topic, late)
	time.Sleep(300 * time.Millisecond)
	if n := raw.XLen(ctx, topic).Val(); n != 1 {
		t.Errorf("stream holds %d entries after the subscription ended, want 1: a mover still runs", n)
	}
}

// Movers of several subscribers (and of several subscriptions of one)
// run concurrently on one stream: each delayed message reaches the stream
// once, so each group receives it exactly once, never early.
func TestDelayedConcurrentMovers(t *testing.T) {
	topic := relaytest.Unique("delaymany")
	raw := rawClient(t)
	cleanupKeys(t, raw, topic)
	groups := []string{relaytest.Unique("g1"), relaytest.Unique("g2")}
	type rec struct {
		id string
		at time.Time
	}
	out := make(chan rec, 10000)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the subscriptions' cancels, registered later
	for _, g := range groups {
		for range 3 {
			sub := openSub(t, g, "delay_poll", "5ms")
			provision(t, sub, topic)
			ch, cancel := relaytest.Subscribe(t, sub, topic)
			t.Cleanup(cancel)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for m := range ch {
					out <- rec{g + "/" + m.ID, time.Now()}
					_ = m.Ack()
				}
			}()
		}
	}
	pub := openPub(t)
	const n = 300
	due := map[string]time.Time{}
	start := time.Now()
	var batch []*relay.Message
	for i := range n {
		m := relay.NewMessage(fmt.Appendf(nil, "m%d", i))
		m.DeliverAt = start.Add(300*time.Millisecond + time.Duration(i)*time.Millisecond)
		due[m.ID] = m.DeliverAt
		batch = append(batch, m)
		if len(batch) == 50 {
			relaytest.Publish(t, pub, topic, batch...)
			batch = nil
		}
	}
	seen := map[string]int{}
	timeout := time.After(30 * time.Second)
	for len(seen) < n*len(groups) {
		select {
		case r := <-out:
			seen[r.id]++
			id := r.id[strings.Index(r.id, "/")+1:]
			if early := due[id].Sub(r.at); early > 2*time.Millisecond {
				t.Errorf("%s delivered %v early", r.id, early)
			}
		case <-timeout:
			t.Fatalf("%d of %d deliveries within 30s", len(seen), n*len(groups))
		}
	}
	time.Sleep(300 * time.Millisecond)
	for len(out) > 0 {
		r := <-out
		seen[r.id]++
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s delivered %d times, want once", id, c)
		}
	}
	if xl := raw.XLen(context.Background(), topic).Val(); xl != n {
		t.Errorf("stream holds %d entries, want %d: each delayed message moved once", xl, n)
	}
}

// The publisher's trimming (maxlen) applies to the XADDs of the mover too.
func TestDelayedMoveTrims(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("delaytrim"), relaytest.Unique("g")
	raw := rawClient(t)
	cleanupKeys(t, raw, topic)
	pub := openPub(t, "maxlen", "10")
	const n = 500
	msgs := newMsgs(n, "t%d")
	for _, m := range msgs {
		m.DeliverAfter(10 * time.Millisecond)
	}
	relaytest.Publish(t, pub, topic, msgs...)
	time.Sleep(20 * time.Millisecond)
	sub := openSub(t, group, "delay_poll", "10ms")
	provision(t, sub, topic)
	_, cancel := relaytest.Subscribe(t, sub, topic)
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	for raw.ZCard(ctx, topic+redisstream.DelayedSuffix).Val() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := raw.ZCard(ctx, topic+redisstream.DelayedSuffix).Val(); left != 0 {
		t.Fatalf("%d delayed messages not moved", left)
	}
	// MAXLEN ~ trims whole stream nodes (100 entries by default): of 500
	// entries, at most a node or two beyond the 10 stay.
	if xl := raw.XLen(ctx, topic).Val(); xl >= n {
		t.Errorf("stream holds %d of %d moved entries: maxlen=10 not applied by the mover", xl, n)
	}
}

func TestDelayPollURL(t *testing.T) {
	for _, v := range []string{"0s", "-1s", "soon"} {
		_, err := relay.OpenSubscriber(context.Background(), "redis://127.0.0.1:1/0?group=g&delay_poll="+v)
		var ue *relay.URLError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), `"delay_poll"`) {
			t.Errorf("delay_poll=%s: %v, want a URL error about delay_poll", v, err)
		}
	}
	if err := (&redisstream.SubscriberConfig{Group: "g", DelayPoll: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "DelayPoll") {
		t.Errorf("negative DelayPoll: %v, want an error naming it", err)
	}
}

// A member the mover cannot move (not of relay's making) stays in the
// delayed set and does not hold back the messages due after it.
func TestDelayedBadMemberDoesNotBlock(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("delaybad"), relaytest.Unique("g")
	raw := rawClient(t)
	cleanupKeys(t, raw, topic)
	set := topic + redisstream.DelayedSuffix
	if err := raw.ZAdd(ctx, set, redis.Z{Score: 1, Member: "not|a|7:member"}, redis.Z{Score: 2, Member: "junk"}).Err(); err != nil {
		t.Fatal(err)
	}
	pub := openPub(t)
	sub := openSub(t, group, "delay_poll", "20ms")
	provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	m := relay.NewMessage([]byte("after the junk")).DeliverAfter(100 * time.Millisecond)
	relaytest.Publish(t, pub, topic, m)
	got := relaytest.Next(t, ch, "the delayed message due after two bad members")
	if got.ID != m.ID {
		t.Fatalf("got %s, want %s", got.ID, m.ID)
	}
	_ = got.Ack()
	if left, _ := raw.ZRange(ctx, set, 0, -1).Result(); len(left) != 2 {
		t.Errorf("delayed set holds %q, want the two bad members", left)
	}
}

// A delayed message with more metadata entries than the mover's script can
// pass to XADD is refused at Publish, naming it; the same message without
// a delay is published.
func TestDelayedMetadataLimit(t *testing.T) {
	topic := relaytest.Unique("delaymd")
	raw := rawClient(t)
	cleanupKeys(t, raw, topic)
	pub := openPub(t)
	md := relay.Metadata{}
	for i := range 4000 {
		md[fmt.Sprint("k", i)] = "v"
	}
	m := &relay.Message{ID: relay.NewID(), Metadata: md, Payload: []byte("x")}
	m.DeliverAfter(time.Minute)
	err := pub.Publish(context.Background(), topic, m)
	var le *relay.LimitError
	if !errors.As(err, &le) || le.MessageID != m.ID || le.What != "metadata entries" {
		t.Fatalf("Publish of a delayed message with 4000 metadata entries: %v, want a *relay.LimitError on metadata entries", err)
	}
	if n := raw.ZCard(context.Background(), topic+redisstream.DelayedSuffix).Val(); n != 0 {
		t.Errorf("refused message in the delayed set (%d members)", n)
	}
	m.DeliverAt = time.Time{}
	relaytest.Publish(t, pub, topic, m)

	// At the limit, with a key, it is moved.
	at := &relay.Message{ID: relay.NewID(), Key: "k", Metadata: relay.Metadata{}, Payload: []byte("y")}
	for i := range 3900 {
		at.Metadata[fmt.Sprint("k", i)] = "v"
	}
	at.DeliverAfter(50 * time.Millisecond)
	relaytest.Publish(t, pub, topic, at)
	sub := openSub(t, relaytest.Unique("g"))
	ch, _ := relaytest.Subscribe(t, sub, topic)
	for _, want := range []*relay.Message{m, at} {
		got := relaytest.Next(t, ch, "message "+want.ID)
		if got.ID != want.ID || len(got.Metadata) != len(want.Metadata) {
			t.Errorf("got %s with %d metadata entries, want %s with %d", got.ID, len(got.Metadata), want.ID, len(want.Metadata))
		}
		_ = got.Ack()
	}
}
