package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// position is where a message sits in the topic.
type position struct {
	part   int32
	offset int64
}

// positions reads topic from the start with a plain client and maps each
// relay ID to its partition and offset.
func positions(t *testing.T, c *cluster, topic string, n int) map[string]position {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]position{}
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(out), n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "relay-id" {
					out[string(h.Value)] = position{r.Partition, r.Offset}
				}
			}
		})
	}
	return out
}

// ledger records every delivery and ack of a test, per consumer.
type ledger struct {
	mu         sync.Mutex
	deliveries map[string][]string // id -> consumers in delivery order
	acked      map[string]string   // id -> consumer whose Ack returned nil
	notAcked   map[string][]string // consumer -> ids delivered but not acked (held or refused)
	attempts   map[string][]int
}

func newLedger() *ledger {
	return &ledger{deliveries: map[string][]string{}, acked: map[string]string{}, notAcked: map[string][]string{}, attempts: map[string][]int{}}
}

// consume delivers ch into the ledger as consumer who, acking every message
// except those hold reports true for. It returns when ch closes.
func (l *ledger) consume(who string, ch <-chan *relay.Message, hold func(id string) bool) {
	for m := range ch {
		l.mu.Lock()
		l.deliveries[m.ID] = append(l.deliveries[m.ID], who)
		l.attempts[m.ID] = append(l.attempts[m.ID], m.Attempt())
		l.mu.Unlock()
		var err error
		if hold(m.ID) {
			err = errors.New("held")
		} else {
			err = m.Ack()
		}
		l.mu.Lock()
		if err == nil {
			l.acked[m.ID] = who
		} else {
			l.notAcked[who] = append(l.notAcked[who], m.ID)
		}
		l.mu.Unlock()
	}
}

func (l *ledger) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		l.mu.Lock()
		ok := cond()
		l.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRebalance: consumer A takes everything and holds a few messages
// unacked; B joins (A loses partitions), more messages flow to both, then A
// leaves. No message is lost, every held message reaches B, and a message
// is delivered twice only if its first consumer left an unacked message at
// or before it in the same partition (the commit rule).
func TestRebalance(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("rebal"), unique("g")
	c.createTopic(t, topic, 4)
	pub := relaytest.OpenPublisher(t, c.url())
	key := func(i int) string { return fmt.Sprint("k", i%16) }
	first := publishN(t, pub, topic, 200, key)
	held := map[string]bool{}
	for i := 7; i < len(first); i += 25 {
		held[first[i].ID] = true
	}

	l := newLedger()
	subA := relaytest.OpenSubscriber(t, c.subURL(group))
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	chA, err := subA.Subscribe(ctxA, topic)
	if err != nil {
		t.Fatal(err)
	}
	doneA := make(chan struct{})
	go func() { defer close(doneA); l.consume("A", chA, func(id string) bool { return held[id] }) }()
	l.waitFor(t, "A to receive the first 200", func() bool { return len(l.deliveries) == 200 })

	// Before B joins, wait until A's acks are committed, so that the
	// rebalance can only redeliver what A did not ack.
	pos := positions(t, c, topic, 200)
	want := map[int32]int64{}
	for id, p := range pos {
		if held[id] {
			if w, ok := want[p.part]; !ok || p.offset < w {
				want[p.part] = p.offset
			}
		}
	}
	end := map[int32]int64{}
	for _, p := range pos {
		end[p.part] = max(end[p.part], p.offset+1)
	}
	for p, e := range end {
		if _, ok := want[p]; !ok {
			want[p] = e
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for fmt.Sprint(c.committed(t, group, topic)) != fmt.Sprint(want) {
		if time.Now().After(deadline) {
			t.Fatalf("committed %v, want %v", c.committed(t, group, topic), want)
		}
		time.Sleep(20 * time.Millisecond)
	}

	subB := relaytest.OpenSubscriber(t, c.subURL(group))
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	chB, err := subB.Subscribe(ctxB, topic)
	if err != nil {
		t.Fatal(err)
	}
	doneB := make(chan struct{})
	go func() { defer close(doneB); l.consume("B", chB, func(string) bool { return false }) }()
	c.waitMembers(t, group, 2)

	second := publishN(t, pub, topic, 200, key)
	l.waitFor(t, "the second 200 to be acked", func() bool {
		for _, m := range second {
			if l.acked[m.ID] == "" {
				return false
			}
		}
		return true
	})

	cancelA() // A leaves: B takes over its partitions, with the held messages
	<-doneA
	all := append(append([]*relay.Message(nil), first...), second...)
	l.waitFor(t, "every message acked", func() bool {
		for _, m := range all {
			if l.acked[m.ID] == "" {
				return false
			}
		}
		return true
	})
	// B also works through what A acked after an unacked message (it is
	// redelivered): wait until B's commits reach the end of every partition.
	pos = positions(t, c, topic, 400)
	end = map[int32]int64{}
	for _, p := range pos {
		end[p.part] = max(end[p.part], p.offset+1)
	}
	deadline = time.Now().Add(60 * time.Second)
	for fmt.Sprint(c.committed(t, group, topic)) != fmt.Sprint(end) {
		if time.Now().After(deadline) {
			t.Fatalf("committed %v, want the end %v", c.committed(t, group, topic), end)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancelB()
	<-doneB

	for id := range held {
		d := l.deliveries[id]
		if len(d) < 2 || d[0] != "A" || l.acked[id] != "B" {
			t.Errorf("held %s: deliveries %v, acked by %q", id, d, l.acked[id])
		}
		if a := l.attempts[id]; a[len(a)-1] < 2 {
			t.Errorf("held %s: attempts %v, want the redelivery counted", id, a)
		}
	}
	// A duplicate needs an unacked message at or before it in its
	// partition, delivered to its first consumer.
	dups := 0
	for _, m := range all {
		d := l.deliveries[m.ID]
		if len(d) < 2 {
			continue
		}
		dups++
		p := pos[m.ID]
		ok := false
		for _, u := range l.notAcked[d[0]] {
			if up := pos[u]; up.part == p.part && up.offset <= p.offset {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("%s (partition %d offset %d) delivered %v, but %s acked everything before it", m.ID, p.part, p.offset, d, d[0])
		}
	}
	t.Logf("400 messages, %d held, %d delivered more than once", len(held), dups)

	if err := subA.Close(); err != nil {
		t.Fatal(err)
	}
	if err := subB.Close(); err != nil {
		t.Fatal(err)
	}
	if got := c.committed(t, group, topic); fmt.Sprint(got) != fmt.Sprint(end) {
		t.Fatalf("committed %v, want the end %v", got, end)
	}
}

// TestRestartResumes: a consumer acks part of the topic and stops; a new
// subscriber (a restarted process) gets exactly the rest.
func TestRestartResumes(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("restart"), unique("g")
	c.createTopic(t, topic, 3)
	pub := relaytest.OpenPublisher(t, c.url())
	msgs := publishN(t, pub, topic, 50, func(i int) string { return fmt.Sprint(i) })

	sub1 := relaytest.OpenSubscriber(t, c.subURL(group))
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub1.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	for len(acked) < 30 {
		m := recv(t, ch)
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
		acked[m.ID] = true
	}
	cancel()
	for range ch {
	}
	if err := sub1.Close(); err != nil {
		t.Fatal(err)
	}
	more := publishN(t, pub, topic, 20, func(i int) string { return fmt.Sprint(i) })

	sub2 := relaytest.OpenSubscriber(t, c.subURL(group))
	ch2, err := sub2.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, m := range append(msgs, more...) {
		if !acked[m.ID] {
			want[m.ID] = true
		}
	}
	for range len(want) {
		m := recv(t, ch2)
		if !want[m.ID] {
			t.Fatalf("got %s (%q): acked before the restart or delivered twice", m.ID, m.Payload)
		}
		delete(want, m.ID)
		_ = m.Ack()
	}
	quiet(t, ch2, 300*time.Millisecond)
}

// TestConnectionFaults drops connections with kfake's control hooks:
// a produce request (the idempotent producer retries without duplicating),
// fetch requests (the consumer resumes) and commits refused for a while
// (retried until they land).
func TestConnectionFaults(t *testing.T) {
	c := newCluster(t)
	c.needFake(t)
	topic, group := unique("fault"), unique("g")
	c.createTopic(t, topic, 2)

	var produceDrops atomic.Int32
	c.fake.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		produceDrops.Add(1)
		return nil, errors.New("injected: connection dropped"), true
	})
	pub := relaytest.OpenPublisher(t, c.url())
	msgs := publishN(t, pub, topic, 50, func(i int) string { return fmt.Sprint(i) })
	if produceDrops.Load() != 1 {
		t.Fatalf("produce drops: %d", produceDrops.Load())
	}

	var fetchDrops, commitRefusals atomic.Int32
	c.fake.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.fake.KeepControl()
		if fetchDrops.Add(1) > 3 {
			c.fake.DropControl()
			return nil, nil, false
		}
		return nil, errors.New("injected: connection dropped"), true
	})
	c.fake.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.fake.KeepControl()
		if commitRefusals.Add(1) > 3 {
			c.fake.DropControl()
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	sub := relaytest.OpenSubscriber(t, c.subURL(group))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range msgs {
		m := recv(t, ch)
		seen[m.ID]++
		_ = m.Ack()
	}
	for _, m := range msgs {
		if seen[m.ID] != 1 {
			t.Fatalf("%s seen %d times", m.ID, seen[m.ID])
		}
	}
	// Commits are refused 3 times, then land.
	deadline := time.Now().Add(30 * time.Second)
	for {
		off := c.committed(t, group, topic)
		if off[0]+off[1] == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed %v after refusals %d", off, commitRefusals.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fetchDrops.Load() < 3 || commitRefusals.Load() < 3 {
		t.Fatalf("faults not exercised: fetch drops %d, commit refusals %d", fetchDrops.Load(), commitRefusals.Load())
	}
	// The idempotent producer retried without duplicates: 50 records in the log.
	ends, err := c.admin(t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 50 {
		t.Fatalf("log holds %d records, want 50", total)
	}
}

// TestPartialPublishFailure fails produce on one partition: Publish names
// exactly the messages sent there, and the others are delivered.
func TestPartialPublishFailure(t *testing.T) {
	c := newCluster(t)
	c.needFake(t)
	topic := unique("partial")
	c.createTopic(t, topic, 2)
	c.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{1}, Err: kerr.InvalidRecord, Count: -1})

	pub := relaytest.OpenPublisher(t, c.url())
	msgs := make([]*relay.Message, 40)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprint(i)))
		msgs[i].Key = fmt.Sprint("key", i)
	}
	err := pub.Publish(context.Background(), topic, msgs...)
	var pe *relay.PublishError
	if !errors.As(err, &pe) {
		t.Fatalf("want *relay.PublishError, got %v", err)
	}
	failed := map[string]bool{}
	for _, id := range pe.FailedIDs() {
		failed[id] = true
	}
	if len(failed) == 0 || len(failed) == len(msgs) {
		t.Fatalf("%d of %d failed; want some", len(failed), len(msgs))
	}
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("cause lost: %v", err)
	}
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g")))
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for range len(msgs) - len(failed) {
		m := recv(t, ch)
		if failed[m.ID] {
			t.Fatalf("%s reported failed but delivered", m.ID)
		}
		_ = m.Ack()
	}
	quiet(t, ch, 300*time.Millisecond)
}
