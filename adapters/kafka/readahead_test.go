package kafka_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/kafka"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// What the member polls ahead of a subscription is bounded by bytes
// (fetch_max_bytes), not only by records: with large records and a window
// of 16, the queue holds at most four times fetch_max_bytes of record
// bytes (what a buffered fetch taken whole may bring) while the handler
// holds its window, not the two windows (8 MiB) that a bound by records
// allowed, and every record still arrives, in order, once acked.
func TestReadAheadIsBoundedByBytes(t *testing.T) {
	c := newCluster(t)
	topic := unique("readahead")
	c.createTopic(t, topic, 1)
	const (
		n          = 48
		size       = 256 << 10
		fetchBytes = 1 << 20
	)
	pub := relaytest.OpenPublisher(t, c.url())
	var ids []string
	for i := range n {
		m := relay.NewMessage(bytes.Repeat([]byte{byte(i)}, size))
		ids = append(ids, m.ID)
		if err := pub.Publish(context.Background(), topic, m); err != nil {
			t.Fatal(err)
		}
	}
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g"), "inflight", "16", "fetch_max_bytes", "1048576"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch // held unacked: the window stays full from here on

	// Wait until polling stopped for a full queue: the same figures
	// over several looks.
	var records, queued, same int
	for deadline := time.Now().Add(30 * time.Second); same < 10; {
		r, b := kafka.QueuedAhead(sub, topic)
		if r > 0 && r == records && b == queued {
			same++
		} else {
			same = 0
		}
		records, queued = r, b
		if time.Now().After(deadline) {
			t.Fatalf("the queue did not settle: %d records, %d bytes", records, queued)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A poll takes a buffered fetch whole when the queue then holds at
	// most four times fetch_max_bytes (receiver.takesWhole), otherwise
	// what fits, which may bring a record past the bound (less than that).
	if limit := 4 * fetchBytes; queued > limit {
		t.Fatalf("%d records (%d bytes) queued ahead of a window of 16, want at most %d bytes", records, queued, limit)
	}

	got := []*relay.Message{first}
	for len(got) < n {
		select {
		case m := <-ch:
			got = append(got, m)
		case <-time.After(30 * time.Second):
			t.Fatalf("received %d of %d", len(got), n)
		}
		if err := got[len(got)-2].Ack(); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range got {
		if m.ID != ids[i] {
			t.Fatalf("message %d is %s, want %s", i, m.ID, ids[i])
		}
		if len(m.Payload) != size || m.Payload[0] != byte(i) || m.Payload[size-1] != byte(i) {
			t.Fatalf("message %d: payload of %d bytes starting %d, want %d bytes of %d", i, len(m.Payload), m.Payload[0], size, i)
		}
	}
}
