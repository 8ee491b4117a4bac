package kafka_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/kafka"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// bucketRecords reads every record of topic's delay bucket topic named by
// bucket ("1s", ...) that is there now.
func bucketRecords(t *testing.T, c *cluster, topic, bucket string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(topic+kafka.DelayTopicInfix+bucket),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out []*kgo.Record
	for ctx.Err() == nil {
		f := cl.PollFetches(ctx)
		f.EachRecord(func(r *kgo.Record) { out = append(out, r) })
		if len(out) > 0 {
			return out
		}
	}
	return out
}

// A delayed message waits in the delay bucket topic of its delay (1s for
// 2.5s), as its own record plus the due time and target headers, keyed
// as the message; it reaches the target when due with its ID, key,
// metadata (a reserved-looking name included) and tombstone intact, and
// without the delay headers.
func TestDelayedRecordWaitsInBucket(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("delayrec"), unique("g")
	pub := relaytest.OpenPublisher(t, c.url())
	m := &relay.Message{ID: relay.NewID(), Key: "the-key", Payload: []byte("later"),
		Metadata: relay.Metadata{"trace": "t1", "relay-x": "y"}, DeliverAt: time.Now().Add(2500 * time.Millisecond)}
	tomb := &relay.Message{ID: relay.NewID(), Key: "the-key", Metadata: relay.Metadata{kafka.MetadataTombstone: "true"},
		DeliverAt: time.Now().Add(2600 * time.Millisecond)}
	relaytest.Publish(t, pub, topic, m, tomb)

	recs := bucketRecords(t, c, topic, "1s")
	if len(recs) != 2 {
		t.Fatalf("bucket 1s holds %d records, want 2", len(recs))
	}
	hdr := map[string]string{}
	for _, h := range recs[0].Headers {
		hdr[h.Key] = string(h.Value)
	}
	if hdr["relay-delay-topic"] != topic || hdr["relay-delay-due"] != fmt.Sprint(m.DeliverAt.UnixNano()) ||
		hdr["relay-id"] != m.ID || string(recs[0].Key) != m.Key || string(recs[0].Value) != "later" {
		t.Errorf("bucket record key %q value %q headers %v", recs[0].Key, recs[0].Value, hdr)
	}
	if recs[1].Value != nil {
		t.Errorf("delayed tombstone has value %q in its bucket, want NULL", recs[1].Value)
	}

	sub := relaytest.OpenSubscriber(t, c.subURL(group))
	ch, _ := relaytest.Subscribe(t, sub, topic)
	for _, want := range []*relay.Message{m, tomb} {
		got := recv(t, ch)
		if early := time.Until(want.DeliverAt); early > 2*time.Millisecond {
			t.Errorf("%s delivered %v early", got.ID, early)
		}
		if got.ID != want.ID || got.Key != want.Key || string(got.Payload) != string(want.Payload) ||
			fmt.Sprint(got.Metadata) != fmt.Sprint(want.Metadata) || !got.DeliverAt.IsZero() {
			t.Errorf("got %s key %q payload %q metadata %v, want %s %q %q %v",
				got.ID, got.Key, got.Payload, got.Metadata, want.ID, want.Key, want.Payload, want.Metadata)
		}
		_ = got.Ack()
	}
	quiet(t, ch, 500*time.Millisecond)
}

// Delays spread over several buckets, published in random order on
// several keys: every message arrives once, none early; per key, in due
// order (the mover keeps up here, so each record reaches its last wait in
// memory before it is due).
func TestDelayedAcrossBuckets(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("delaymany"), unique("g")
	pub := relaytest.OpenPublisher(t, c.url())
	sub := relaytest.OpenSubscriber(t, c.subURL(group))
	ch, _ := relaytest.Subscribe(t, sub, topic)

	const n = 120
	start := time.Now()
	due := map[string]time.Time{}
	keyOf := map[string]string{}
	var msgs []*relay.Message
	for i := range n {
		m := relay.NewMessage(fmt.Appendf(nil, "m%d", i))
		m.Key = fmt.Sprintf("k%d", i%4)
		m.DeliverAt = start.Add(200*time.Millisecond + time.Duration(i)*11500*time.Millisecond/n)
		due[m.ID], keyOf[m.ID] = m.DeliverAt, m.Key
		msgs = append(msgs, m)
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	for i := 0; i < n; i += 10 {
		relaytest.Publish(t, pub, topic, msgs[i:i+10]...)
	}
	seen := map[string]int{}
	lastDue := map[string]time.Time{}
	outOfOrder := 0
	for len(seen) < n {
		got := recv(t, ch)
		d, ok := due[got.ID]
		if !ok {
			t.Fatalf("unknown message %s", got.ID)
		}
		if early := time.Until(d); early > 2*time.Millisecond {
			t.Errorf("%s delivered %v early", got.ID, early)
		}
		if seen[got.ID] == 0 {
			if d.Before(lastDue[got.Key]) {
				outOfOrder++
			}
			lastDue[got.Key] = d
		}
		seen[got.ID]++
		_ = got.Ack()
	}
	quiet(t, ch, time.Second)
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s delivered %d times", id, k)
		}
	}
	if outOfOrder > 0 {
		t.Errorf("%d messages delivered before an earlier-due message of their key", outOfOrder)
	}
}

// DelayTopics names one topic per bucket, smallest first.
func TestDelayTopics(t *testing.T) {
	got := kafka.DelayTopics("orders")
	want := []string{"orders.relay-delay-0s", "orders.relay-delay-1s", "orders.relay-delay-10s", "orders.relay-delay-1m0s",
		"orders.relay-delay-10m0s", "orders.relay-delay-1h0m0s", "orders.relay-delay-10h0m0s"}
	if !slices.Equal(got, want) {
		t.Errorf("DelayTopics: %v, want %v", got, want)
	}
}

// Movers of several subscribers share the bucket partitions in their
// group, and one that joins while records wait (a rebalance that revokes
// partitions whose records are in memory) loses nothing: every message
// arrives, none early. A rebalance may repeat moves (counted, allowed).
func TestDelayedMoversRebalance(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("delayreb"), unique("g")
	pub := relaytest.OpenPublisher(t, c.url("partitions", "4"))
	type rec struct {
		id string
		at time.Time
	}
	out := make(chan rec, 1000)
	subscribe := func() {
		sub := relaytest.OpenSubscriber(t, c.subURL(group, "partitions", "4"))
		ch, cancel := relaytest.Subscribe(t, sub, topic)
		t.Cleanup(cancel)
		go func() {
			for m := range ch {
				out <- rec{m.ID, time.Now()}
				_ = m.Ack()
			}
		}()
	}
	subscribe()
	const n = 200
	start := time.Now()
	due := map[string]time.Time{}
	var msgs []*relay.Message
	for i := range n {
		m := relay.NewMessage(fmt.Appendf(nil, "m%d", i))
		m.Key = fmt.Sprintf("k%d", i%8)
		m.DeliverAt = start.Add(500*time.Millisecond + time.Duration(i)*4*time.Second/n)
		due[m.ID] = m.DeliverAt
		msgs = append(msgs, m)
	}
	relaytest.Publish(t, pub, topic, msgs...)
	time.Sleep(1200 * time.Millisecond) // records now wait in the first mover's memory and buckets
	subscribe()
	subscribe()
	seen := map[string]int{}
	deadline := time.After(60 * time.Second)
	for len(seen) < n {
		select {
		case r := <-out:
			if early := due[r.id].Sub(r.at); early > 2*time.Millisecond {
				t.Errorf("%s delivered %v early", r.id, early)
			}
			seen[r.id]++
		case <-deadline:
			t.Fatalf("%d of %d delayed messages within 60s", len(seen), n)
		}
	}
	quiet := time.After(time.Second)
	for done := false; !done; {
		select {
		case r := <-out:
			seen[r.id]++
		case <-quiet:
			done = true
		}
	}
	dups := 0
	for _, k := range seen {
		dups += k - 1
	}
	t.Logf("%d messages, %d repeated deliveries across the rebalances", n, dups)
}

// The delay mover commits its bucket partitions up to the records it has
// moved, so that the next owner of a partition (after a restart or a
// rebalance) does not move them again: once every delayed message has
// arrived, the mover group's committed offsets reach the bucket's end.
func TestDelayMoverCommitsWhatItMoved(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("delaycommit"), unique("g")
	pub := relaytest.OpenPublisher(t, c.url())
	const n = 5
	var msgs []*relay.Message
	for i := range n {
		m := relay.NewMessage(fmt.Appendf(nil, "m%d", i))
		m.DeliverAt = time.Now().Add(300 * time.Millisecond)
		msgs = append(msgs, m)
	}
	relaytest.Publish(t, pub, topic, msgs...)
	bucket := topic + kafka.DelayTopicInfix + "0s"
	ends, err := c.admin(t).ListEndOffsets(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	want, total := map[int32]int64{}, int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			total += o.Offset
		}
	})
	if total != n {
		t.Fatalf("bucket %s holds %d records (%v), want %d", bucket, total, want, n)
	}

	sub := relaytest.OpenSubscriber(t, c.subURL(group))
	ch, _ := relaytest.Subscribe(t, sub, topic)
	for range n {
		_ = recv(t, ch).Ack()
	}
	var got map[int32]int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = c.committed(t, "relay-delay-mover."+topic, bucket)
		if maps.Equal(got, want) {
			return
		}
	}
	t.Fatalf("the delay mover committed %v on %s, want the bucket's end %v", got, bucket, want)
}
