package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// The reader's read-ahead keeps to inflight_bytes as well as inflight:
// with inflight=256 and inflight_bytes=1MiB, a subscriber that holds its
// messages unsettled has read (so leased from the group, XPENDING) about
// 1 MiB of a backlog of 100 messages of 256 KiB, not 256 of them. Without
// the byte bound the reader would read the whole backlog into memory,
// whatever the shared layer then delivers.
func TestReadAheadKeepsToInFlightBytes(t *testing.T) {
	const (
		size   = 256 << 10
		total  = 100
		window = 1 << 20
	)
	topic, group := relaytest.Unique("window-bytes"), relaytest.Unique("g")
	rc := rawClient(t)
	t.Cleanup(func() { _ = rc.Del(context.Background(), topic).Err() })
	pub := openPub(t)
	sub := openSub(t, group, "inflight", "256", "inflight_bytes", "1MiB")
	provision(t, sub, topic)
	msgs := make([]*relay.Message, total)
	for i := range msgs {
		msgs[i] = relay.NewMessage(make([]byte, size))
	}
	relaytest.Publish(t, pub, topic, msgs...)
	ch, cancel := relaytest.Subscribe(t, sub, topic)
	defer cancel()
	var held []*relay.Message
	held = append(held, relaytest.Next(t, ch, "first message"))
	// Whatever the reader was going to read ahead, it reads within a few
	// round trips; watch the leases for a second.
	most := int64(0)
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		select {
		case m := <-ch:
			held = append(held, m)
		case <-time.After(20 * time.Millisecond):
		}
		p, err := rc.XPending(context.Background(), topic, group).Result()
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, p.Count)
	}
	// One message beyond the bound may be read (the window never stops
	// below one message of the recent size).
	if limit := int64(window/size + 1); most > limit {
		t.Errorf("the subscriber leased %d entries of %d B with inflight_bytes=%d: want at most %d", most, size, window, limit)
	}
	if len(held) == 0 || most == 0 {
		t.Errorf("nothing delivered (%d held, %d leased): the check saw nothing", len(held), most)
	}
	t.Logf("leased at most %d entries, %d delivered", most, len(held))
	for _, m := range held {
		_ = m.Ack()
	}
}
