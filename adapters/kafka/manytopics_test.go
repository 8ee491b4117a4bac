package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// topicReader consumes one subscription, acking everything except the IDs
// hold reports, and records what arrived.
type topicReader struct {
	mu   sync.Mutex
	seen map[string]int
	held []*relay.Message
	done chan struct{}
}

func readTopic(ch <-chan *relay.Message, hold func(*relay.Message) bool) *topicReader {
	r := &topicReader{seen: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for m := range ch {
			r.mu.Lock()
			r.seen[m.ID]++
			if hold != nil && hold(m) {
				r.held = append(r.held, m)
				r.mu.Unlock()
				continue
			}
			r.mu.Unlock()
			_ = m.Ack()
		}
	}()
	return r
}

// waitAll waits until every message of want arrived, then checks that
// each arrived exactly once.
func (r *topicReader) waitAll(t *testing.T, what string, want []*relay.Message) {
	t.Helper()
	r.wait(t, what, want, true)
}

// wait waits until every message of want arrived; with exact, it checks
// that each arrived once.
func (r *topicReader) wait(t *testing.T, what string, want []*relay.Message, exact bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.mu.Lock()
		missing := 0
		for _, m := range want {
			if r.seen[m.ID] == 0 {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d messages missing after 60s", what, missing, len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range want {
		if n := r.seen[m.ID]; exact && n != 1 {
			t.Errorf("%s: %s delivered %d times", what, m.ID, n)
		}
	}
}

// TestOneGroupManyTopics: one subscriber (one group) subscribes to ten
// topics at once, with start=latest for a group new to all of them (the
// start position is committed while sibling subscriptions are joining and
// rebalancing), then ten more topics one after another while the first ones
// keep flowing. No Subscribe fails, and every message published after its
// Subscribe returned arrives exactly once (with start=earliest, also those
// published before; with start=latest, none of those). With the eager
// range balancer every added topic revokes all partitions, so messages in
// flight then are delivered again: each arrives at least once.
func TestOneGroupManyTopics(t *testing.T) {
	for _, tc := range []struct{ start, balancer string }{
		{"earliest", "cooperative-sticky"}, {"latest", "cooperative-sticky"}, {"latest", "range"},
	} {
		start, exact := tc.start, tc.balancer == "cooperative-sticky"
		t.Run(start+"/"+tc.balancer, func(t *testing.T) {
			c := newCluster(t)
			group := unique("g")
			pub := relaytest.OpenPublisher(t, c.url("partitions", "3"))
			sub := relaytest.OpenSubscriber(t, c.subURL(group, "start", start, "partitions", "3", "balancer", tc.balancer))
			const concurrent, sequential, n = 10, 10, 30
			topics := make([]string, concurrent+sequential)
			for i := range topics {
				topics[i] = unique(fmt.Sprintf("many%d", i))
			}
			// Published before the Subscribe of each topic: delivered with
			// start=earliest, skipped with start=latest (also for the
			// topics subscribed once the group has members, whose start
			// position is committed through the member).
			want := make([][]*relay.Message, len(topics))
			for i, topic := range topics {
				old := publishN(t, pub, topic, 2, nil)
				if start == "earliest" {
					want[i] = old
				}
			}

			readers := make([]*topicReader, len(topics))
			var wg sync.WaitGroup
			errs := make([]error, concurrent)
			for i := range concurrent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ch, err := sub.Subscribe(context.Background(), topics[i])
					if err != nil {
						errs[i] = err
						return
					}
					readers[i] = readTopic(ch, nil)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("concurrent Subscribe(%s): %v", topics[i], err)
				}
			}
			for i := range concurrent {
				want[i] = append(want[i], publishN(t, pub, topics[i], n, func(j int) string { return fmt.Sprint(j) })...)
			}
			// More topics one after another, each joining while the
			// others receive.
			for i := concurrent; i < len(topics); i++ {
				ch, err := sub.Subscribe(context.Background(), topics[i])
				if err != nil {
					t.Fatalf("Subscribe(%s): %v", topics[i], err)
				}
				readers[i] = readTopic(ch, nil)
				want[i] = append(want[i], publishN(t, pub, topics[i], n, func(j int) string { return fmt.Sprint(j) })...)
				more := publishN(t, pub, topics[i-concurrent], n, nil)
				want[i-concurrent] = append(want[i-concurrent], more...)
			}
			for i, r := range readers {
				r.wait(t, topics[i], want[i], exact)
			}
			// Records published before a start=latest Subscribe would sit before
			// the awaited ones in their partitions, so they would have come by
			// now; a short extra wait covers partitions without awaited records.
			time.Sleep(300 * time.Millisecond)
			for i, r := range readers {
				r.mu.Lock()
				if len(r.seen) != len(want[i]) {
					t.Errorf("%s: %d distinct messages, want %d (start=%s)", topics[i], len(r.seen), len(want[i]), start)
				}
				r.mu.Unlock()
			}
			if err := sub.Close(); err != nil {
				t.Fatal(err)
			}
			for _, r := range readers {
				<-r.done
			}
			// Everything acked is committed: a restarted subscriber gets
			// nothing again.
			sub2 := relaytest.OpenSubscriber(t, c.subURL(group, "start", start))
			ch, err := sub2.Subscribe(context.Background(), topics[0])
			if err != nil {
				t.Fatal(err)
			}
			quiet(t, ch, 500*time.Millisecond)
		})
	}
}

// TestTopicEndsWhileSiblingsFlow: of three topics on one subscriber, one
// subscription ends holding unacked messages. The other two keep
// receiving; a new subscription of the ended topic on the same subscriber
// gets the released messages (and nothing that was acked) plus what was
// published meanwhile.
func TestTopicEndsWhileSiblingsFlow(t *testing.T) {
	c := newCluster(t)
	group := unique("g")
	pub := relaytest.OpenPublisher(t, c.url("partitions", "2"))
	sub := relaytest.OpenSubscriber(t, c.subURL(group, "partitions", "2"))
	topics := []string{unique("end0"), unique("end1"), unique("end2")}
	readers := make([]*topicReader, len(topics))
	var cancel0 context.CancelFunc
	for i, topic := range topics {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		var hold func(*relay.Message) bool
		if i == 0 {
			cancel0 = cancel
			hold = func(m *relay.Message) bool { return string(m.Payload) == "m3" || string(m.Payload) == "m7" }
		}
		readers[i] = readTopic(ch, hold)
	}
	first := make([][]*relay.Message, len(topics))
	for i, topic := range topics {
		first[i] = publishN(t, pub, topic, 10, func(j int) string { return fmt.Sprint(j) })
	}
	for i, r := range readers {
		r.waitAll(t, topics[i], first[i])
	}
	cancel0()
	<-readers[0].done
	if len(readers[0].held) != 2 {
		t.Fatalf("held %d messages, want 2", len(readers[0].held))
	}
	meanwhile := publishN(t, pub, topics[0], 5, nil)
	for i := 1; i < len(topics); i++ {
		more := publishN(t, pub, topics[i], 10, nil)
		readers[i].waitAll(t, topics[i], append(first[i], more...))
	}

	ch, err := sub.Subscribe(context.Background(), topics[0])
	if err != nil {
		t.Fatal(err)
	}
	again := readTopic(ch, nil)
	// Acked messages after a held one in its partition come again (the
	// group keeps an offset, not per-message acks); every held and every
	// new message must arrive.
	again.waitAll(t, topics[0]+" again", append(append([]*relay.Message(nil), readers[0].held...), meanwhile...))
	for _, r := range readers[1:] {
		r.mu.Lock()
		for id, n := range r.seen {
			if n != 1 {
				t.Errorf("sibling topic: %s delivered %d times", id, n)
			}
		}
		r.mu.Unlock()
	}
}

// TestSameTopicTwiceOnOneSubscriber: two concurrent subscriptions of one
// topic on one subscriber compete (two members): together they get every
// message once.
func TestSameTopicTwiceOnOneSubscriber(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("twice"), unique("g")
	c.createTopic(t, topic, 4)
	pub := relaytest.OpenPublisher(t, c.url())
	sub := relaytest.OpenSubscriber(t, c.subURL(group))
	ch1, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	ch2, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	c.waitMembers(t, group, 2)
	r1, r2 := readTopic(ch1, nil), readTopic(ch2, nil)
	msgs := publishN(t, pub, topic, 100, func(i int) string { return fmt.Sprint(i) })
	merged := &topicReader{seen: map[string]int{}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		merged.seen = map[string]int{}
		for _, r := range []*topicReader{r1, r2} {
			r.mu.Lock()
			for id, n := range r.seen {
				merged.seen[id] += n
			}
			r.mu.Unlock()
		}
		if len(merged.seen) >= len(msgs) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	merged.waitAll(t, topic, msgs)
	r1.mu.Lock()
	n1 := len(r1.seen)
	r1.mu.Unlock()
	if n1 == 0 || n1 == len(msgs) {
		t.Errorf("first subscription got %d of %d: not shared", n1, len(msgs))
	}
}

// TestSlowTopicDoesNotStallSiblings: two topics on one member with a
// window of 4. Nobody reads the first topic's channel, so its fetched
// records pile up and the topic is paused; the second topic still gets
// every message. Then the first topic is read: it resumes and delivers
// everything.
func TestSlowTopicDoesNotStallSiblings(t *testing.T) {
	c := newCluster(t)
	slow, fast := unique("slow"), unique("fast")
	c.createTopic(t, slow, 2)
	c.createTopic(t, fast, 2)
	pub := relaytest.OpenPublisher(t, c.url())
	slowMsgs := publishN(t, pub, slow, 100, func(i int) string { return fmt.Sprint(i) })
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g"), "inflight", "4"))
	chSlow, err := sub.Subscribe(context.Background(), slow)
	if err != nil {
		t.Fatal(err)
	}
	chFast, err := sub.Subscribe(context.Background(), fast)
	if err != nil {
		t.Fatal(err)
	}
	fastR := readTopic(chFast, nil)
	fastMsgs := publishN(t, pub, fast, 200, func(i int) string { return fmt.Sprint(i) })
	fastR.waitAll(t, fast, fastMsgs)
	slowR := readTopic(chSlow, nil)
	slowR.waitAll(t, slow, slowMsgs)
}
