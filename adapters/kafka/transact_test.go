package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/kafka"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/router"
)

func openTx(t testing.TB, u string) *kafka.TxPublisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := kafka.OpenTxPublisher(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func idsMsgs(ids ...string) []*relay.Message {
	ms := make([]*relay.Message, len(ids))
	for i, id := range ids {
		ms[i] = &relay.Message{ID: id, Payload: []byte("p-" + id)}
	}
	return ms
}

func seq(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return ids
}

// readIDs subscribes to topic with a new group and the given isolation and
// returns the IDs of messages (acked) until stop says the list is complete.
func readIDs(t testing.TB, c *cluster, topic, isolation string, stop func([]string) bool) []string {
	t.Helper()
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g"), "isolation", isolation))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for !stop(got) {
		m := recv(t, ch)
		got = append(got, m.ID)
		_ = m.Ack()
	}
	return got
}

func upTo(last string) func([]string) bool {
	return func(ids []string) bool { return len(ids) > 0 && ids[len(ids)-1] == last }
}

// TestIsolation: a read_committed subscriber skips the records of an
// aborted transaction and gets the committed ones; read_uncommitted gets
// both. One partition, aborted records first, so reaching the last
// committed record proves the aborted ones were passed over.
func TestIsolation(t *testing.T) {
	c := newCluster(t)
	topic := unique("iso")
	c.createTopic(t, topic, 1)
	tx := openTx(t, c.url("transactional_id", unique("tx")))
	ctx := context.Background()
	aborted, committed := seq("a", 5), seq("c", 5)
	if err := tx.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Publish(ctx, topic, idsMsgs(aborted...)...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Transact(ctx, func(ctx context.Context, pub relay.Publisher) error {
		return pub.Publish(ctx, topic, idsMsgs(committed...)...)
	}); err != nil {
		t.Fatal(err)
	}
	if got := readIDs(t, c, topic, "read_committed", upTo("c4")); !slices.Equal(got, committed) {
		t.Fatalf("read_committed got %v; want %v", got, committed)
	}
	if got, want := readIDs(t, c, topic, "read_uncommitted", upTo("c4")), append(slices.Clone(aborted), committed...); !slices.Equal(got, want) {
		t.Fatalf("read_uncommitted got %v; want %v", got, want)
	}
}

// TestTxPublisherTopics: one transaction over two topics is visible on
// both when committed and on neither when aborted (Transact with an error).
func TestTxPublisherTopics(t *testing.T) {
	c := newCluster(t)
	ta, tb := unique("txa"), unique("txb")
	c.createTopic(t, ta, 1)
	c.createTopic(t, tb, 1)
	tx := openTx(t, c.url("transactional_id", unique("tx")))
	ctx := context.Background()
	boom := errors.New("boom")
	err := tx.Transact(ctx, func(ctx context.Context, pub relay.Publisher) error {
		if err := pub.Publish(ctx, ta, idsMsgs("xa0", "xa1")...); err != nil {
			return err
		}
		if err := pub.Publish(ctx, tb, idsMsgs("xb0")...); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Transact: %v; want boom", err)
	}
	if err := tx.Transact(ctx, func(ctx context.Context, pub relay.Publisher) error {
		return errors.Join(pub.Publish(ctx, ta, idsMsgs("ya0", "ya1")...), pub.Publish(ctx, tb, idsMsgs("yb0")...))
	}); err != nil {
		t.Fatal(err)
	}
	if got := readIDs(t, c, ta, "read_committed", upTo("ya1")); !slices.Equal(got, []string{"ya0", "ya1"}) {
		t.Fatalf("%s: %v", ta, got)
	}
	if got := readIDs(t, c, tb, "read_committed", upTo("yb0")); !slices.Equal(got, []string{"yb0"}) {
		t.Fatalf("%s: %v", tb, got)
	}
}

// TestTxPublisherMisuse: publishing outside a transaction, a missing
// transactional_id and a plain publisher given one are refused.
func TestTxPublisherMisuse(t *testing.T) {
	c := newCluster(t)
	tx := openTx(t, c.url("transactional_id", unique("tx")))
	if err := tx.Publish(context.Background(), unique("t"), idsMsgs("m")...); !errors.Is(err, kafka.ErrNoTransaction) {
		t.Fatalf("Publish outside a transaction: %v; want ErrNoTransaction", err)
	}
	if err := tx.Commit(context.Background()); !errors.Is(err, kafka.ErrNoTransaction) {
		t.Fatalf("Commit outside a transaction: %v; want ErrNoTransaction", err)
	}
	if _, err := kafka.OpenTxPublisher(context.Background(), c.url()); !errors.Is(err, relay.ErrBadURL) ||
		!strings.Contains(err.Error(), "transactional_id: required") {
		t.Fatalf("without transactional_id: %v", err)
	}
	if _, err := relay.OpenPublisher(context.Background(), c.url("transactional_id", "x")); !errors.Is(err, relay.ErrBadURL) ||
		!strings.Contains(err.Error(), "transactional_id: only kafka.NewTxPublisher") {
		t.Fatalf("plain publisher with transactional_id: %v", err)
	}
	if _, err := relay.OpenPublisher(context.Background(), c.url("transaction_timeout", "soon")); err == nil {
		t.Fatal("transaction_timeout=soon accepted")
	}
}

func openPair(t testing.TB, c *cluster, group, txid string) (relay.ExactlyOnceSubscriber, relay.Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, pub, err := relay.OpenExactlyOnce(ctx, c.subURL(group, "transactional_id", txid), c.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close(); _ = pub.Close() })
	return sub, pub
}

// checkOnce reads out (one partition) with the given isolation up to a
// marker published now (after the pair finished), reports each ID of want
// that is missing and any ID not in want, and returns the number of
// duplicates.
func checkOnce(t *testing.T, c *cluster, out, isolation string, want []string) (dups int) {
	t.Helper()
	marker := unique("end")
	p := relaytest.OpenPublisher(t, c.url())
	if err := p.Publish(context.Background(), out, idsMsgs(marker)...); err != nil {
		t.Fatal(err)
	}
	got := readIDs(t, c, out, isolation, upTo(marker))
	got = got[:len(got)-1]
	count := map[string]int{}
	for _, id := range got {
		if !strings.HasPrefix(id, "end-") { // markers of earlier checks
			count[id]++
		}
	}
	for _, id := range want {
		switch n := count[id]; {
		case n == 0:
			t.Errorf("%s: %s lost", isolation, id)
		case n > 1:
			dups += n - 1
		}
		delete(count, id)
	}
	if len(count) > 0 {
		t.Errorf("%s: unexpected IDs %v", isolation, count)
	}
	return dups
}

// waitCommitted waits until group has committed n records of topic.
func waitCommitted(t *testing.T, c *cluster, group, topic string, n int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	adm := c.admin(t)
	for {
		var sum int64
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := adm.FetchOffsets(ctx, group) // GROUP_ID_NOT_FOUND before the first commit
		cancel()
		if err == nil {
			resp.Each(func(o kadm.OffsetResponse) {
				if o.Topic == topic && o.Err == nil {
					sum += o.At
				}
			})
		}
		if sum == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s committed %d of %d records of %s", group, sum, n, topic)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExactlyOnceRouter: a router handler on a pair, with exactly-once,
// forwards every input once to read_committed consumers although every
// tenth message fails once after its output was published (so its
// transaction aborts and the whole poll is redelivered); read_uncommitted
// sees the aborted copies.
func TestExactlyOnceRouter(t *testing.T) {
	c := newCluster(t)
	in, out, group := unique("in"), unique("out"), unique("g")
	c.createTopic(t, in, 4)
	c.createTopic(t, out, 1)
	const n = 300
	src := relaytest.OpenPublisher(t, c.url())
	want := seq("m", n)
	if err := src.Publish(context.Background(), in, idsMsgs(want...)...); err != nil {
		t.Fatal(err)
	}
	sub, pub := openPair(t, c, group, unique("tx"))
	if !sub.ExactlyOnceWith(pub) || sub.ExactlyOnceWith(src) {
		t.Fatal("ExactlyOnceWith does not tell the pair's publisher")
	}
	r, err := router.New(router.Config{RedeliveryDelay: router.NoRedeliveryDelay})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	failed := map[string]bool{}
	h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		var i int
		fmt.Sscanf(m.ID, "m%d", &i)
		mu.Lock()
		fail := i%10 == 0 && !failed[m.ID]
		failed[m.ID] = true
		mu.Unlock()
		if fail {
			// The output goes into the transaction, which then aborts.
			if err := pub.Publish(ctx, out, m.Copy()); err != nil {
				return nil, err
			}
			return nil, errors.New("fail once")
		}
		return []*relay.Message{m.Copy()}, nil
	}
	if err := r.AddHandler("eo", sub, in, h, router.WithGuarantee(relay.ExactlyOnce), router.WithOutput(pub, out),
		router.WithConcurrency(4)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitCommitted(t, c, group, in, n)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := checkOnce(t, c, out, "read_committed", want); d != 0 {
		t.Fatalf("read_committed: %d duplicates", d)
	}
	if d := checkOnce(t, c, out, "read_uncommitted", want); d < n/10 {
		t.Fatalf("read_uncommitted: %d duplicates; want the %d aborted outputs at least", d, n/10)
	}
}

// TestExactlyOnceFencing: a second pair with the same transactional_id
// fences the first: the first's commit fails with ErrFenced, its
// subscription ends, its output is never visible to read_committed, and
// the second pair forwards the input once.
func TestExactlyOnceFencing(t *testing.T) {
	c := newCluster(t)
	in, out, group, txid := unique("in"), unique("out"), unique("g"), unique("tx")
	c.createTopic(t, in, 1)
	c.createTopic(t, out, 1)
	src := relaytest.OpenPublisher(t, c.url())
	if err := src.Publish(context.Background(), in, idsMsgs("m0")...); err != nil {
		t.Fatal(err)
	}
	sub1, pub1 := openPair(t, c, group, txid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch1, err := sub1.Subscribe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, ch1)
	zombie := m.Copy()
	zombie.ID = "zombie-" + m.ID
	if err := pub1.Publish(ctx, out, zombie); err != nil {
		t.Fatal(err)
	}
	sub2, pub2 := openPair(t, c, group, txid) // fences pair 1
	_ = m.Ack()
	// The subscription ends on the failed commit.
	for ended := false; !ended; {
		select {
		case _, ok := <-ch1:
			ended = !ok
		case <-time.After(30 * time.Second):
			t.Fatal("the fenced pair's subscription did not end: its commit succeeded")
		}
	}
	if err := sub1.(relay.HealthChecker).Health(); !errors.Is(err, kafka.ErrFenced) || !errors.Is(err, relay.ErrTakenOver) ||
		errors.Is(err, kafka.ErrTransactionTimedOut) {
		t.Fatalf("fenced pair's Health: %v; want ErrFenced (relay.ErrTakenOver)", err)
	}
	if err := pub1.Publish(ctx, out, idsMsgs("late")...); err == nil {
		t.Fatal("the fenced pair's publisher still publishes")
	}
	ch2, err := sub2.Subscribe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	m2 := recv(t, ch2)
	if m2.ID != "m0" {
		t.Fatalf("second pair got %s", m2.ID)
	}
	if err := pub2.Publish(ctx, out, m2.Copy()); err != nil {
		t.Fatal(err)
	}
	_ = m2.Ack()
	waitCommitted(t, c, group, in, 1)
	if d := checkOnce(t, c, out, "read_committed", []string{"m0"}); d != 0 {
		t.Fatalf("%d duplicates", d)
	}
}

// TestExactlyOnceTransactionTimeout: a pair whose transaction outlives
// transaction_timeout (a process paused while it forwards, shortened here
// to a handler that waits) is fenced by the coordinator's abort: its next
// publish fails with ErrTransactionTimedOut (relay.ErrFenced, not
// relay.ErrTakenOver: nobody else took over), its subscription ends at once
// although a message is unsettled, it leaves the group (a new pair of the
// group gets the partition without waiting out the 60 s session timeout),
// and the input is forwarded once by the new pair.
func TestExactlyOnceTransactionTimeout(t *testing.T) {
	c := newCluster(t)
	c.needFake(t) // a real broker's transaction_timeout floor is 1 s, and its abort is slower
	in, out, group := unique("in"), unique("out"), unique("g")
	c.createTopic(t, in, 1)
	c.createTopic(t, out, 1)
	src := relaytest.OpenPublisher(t, c.url())
	if err := src.Publish(context.Background(), in, idsMsgs("m0")...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(txid string) (relay.ExactlyOnceSubscriber, relay.Publisher) {
		octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
		defer ocancel()
		sub, pub, err := relay.OpenExactlyOnce(octx, c.subURL(group, "transactional_id", txid,
			"session_timeout", "60s", "transaction_timeout", "300ms"), c.url())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close(); _ = pub.Close() })
		return sub, pub
	}
	sub1, pub1 := open(unique("tx"))
	ch1, err := sub1.Subscribe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, ch1)
	if err := pub1.Publish(ctx, out, idsMsgs("zombie")...); err != nil {
		t.Fatal(err)
	}
	var perr error
	for perr == nil { // until the coordinator aborted the transaction
		time.Sleep(100 * time.Millisecond)
		perr = pub1.Publish(ctx, out, idsMsgs("late")...)
	}
	if !errors.Is(perr, kafka.ErrTransactionTimedOut) || !errors.Is(perr, relay.ErrFenced) ||
		errors.Is(perr, relay.ErrTakenOver) || errors.Is(perr, kafka.ErrFenced) {
		t.Fatalf("publish after the timeout: %v; want ErrTransactionTimedOut (relay.ErrFenced, not ErrTakenOver)", perr)
	}
	if _, ok := <-ch1; ok {
		t.Fatal("the timed-out pair delivered another message")
	}
	if err := sub1.(relay.HealthChecker).Health(); !errors.Is(err, kafka.ErrTransactionTimedOut) {
		t.Fatalf("timed-out pair's Health: %v; want ErrTransactionTimedOut", err)
	}
	if err := m.Ack(); err == nil {
		t.Fatal("acking a message of the ended subscription succeeded")
	}
	sub2, pub2 := open(unique("tx"))
	ch2, err := sub2.Subscribe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	m2 := recv(t, ch2) // the 60 s session of pair 1 would hold the partition
	if m2.ID != "m0" {
		t.Fatalf("new pair got %s", m2.ID)
	}
	if err := pub2.Publish(ctx, out, m2.Copy()); err != nil {
		t.Fatal(err)
	}
	_ = m2.Ack()
	waitCommitted(t, c, group, in, 1)
	if d := checkOnce(t, c, out, "read_committed", []string{"m0"}); d != 0 {
		t.Fatalf("%d duplicates", d)
	}
}

// TestExactlyOnceConfig: the pair's URL rules.
func TestExactlyOnceConfig(t *testing.T) {
	c := newCluster(t)
	cases := []struct{ src, dst, want string }{
		{c.subURL("g"), c.url(), "transactional_id: required"},
		{c.subURL("g", "transactional_id", "a"), "kafka://elsewhere:9092", "one Kafka cluster"},
		{c.subURL("g", "transactional_id", "a"), c.url("transactional_id", "b"), `the source says "a", the destination "b"`},
		{c.subURL("g", "transactional_id", "a", "start", "latest"), c.url(), "start=earliest"},
		{c.subURL("g", "transactional_id", "a", "isolation", "read_uncommitted"), c.url(), "isolation=read_committed"},
		{c.subURL("g", "transactional_id", "a"), c.url("acks", "leader"), "acks=all"},
	}
	for _, k := range cases {
		err := relay.CheckExactlyOnce(k.src, k.dst)
		if err == nil || !strings.Contains(err.Error(), k.want) {
			t.Errorf("CheckExactlyOnce(%s, %s): %v; want %q", k.src, k.dst, err, k.want)
		}
	}
	if err := relay.CheckExactlyOnce(c.subURL("g", "transactional_id", "a"), c.url()); err != nil {
		t.Fatal(err)
	}
}

// TestExactlyOnceScaleOut: a second pair (its own transactional_id) joins
// the group while the first forwards, so the group rebalances with
// transactions open (they abort and their polls are redelivered); a
// read_committed reader still gets every input once. Publishing on a
// pair outside a transaction fails with ErrNoTransaction.
func TestExactlyOnceScaleOut(t *testing.T) {
	c := newCluster(t)
	in, out, group := unique("in"), unique("out"), unique("g")
	c.createTopic(t, in, 4)
	c.createTopic(t, out, 1)
	const n = 2000
	want := seq("m", n)
	src := relaytest.OpenPublisher(t, c.url())
	if err := src.Publish(context.Background(), in, idsMsgs(want...)...); err != nil {
		t.Fatal(err)
	}
	var once sync.Map
	var distinct, redelivered atomic.Int32
	quarter := make(chan struct{})
	run := func(sub relay.Subscriber, pub relay.Publisher) (stop func()) {
		r, err := router.New(router.Config{RedeliveryDelay: router.NoRedeliveryDelay})
		if err != nil {
			t.Fatal(err)
		}
		h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			if _, seen := once.LoadOrStore(m.ID, true); !seen {
				if distinct.Add(1) == n/4 {
					close(quarter)
				}
			} else {
				redelivered.Add(1)
			}
			return []*relay.Message{m.Copy()}, nil
		}
		if err := r.AddHandler("eo", sub, in, h, router.WithGuarantee(relay.ExactlyOnce), router.WithOutput(pub, out)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	sub1, pub1 := openPair(t, c, group, unique("tx"))
	if err := pub1.Publish(context.Background(), out, idsMsgs("stray")...); !errors.Is(err, kafka.ErrNoTransaction) {
		t.Fatalf("Publish outside a transaction: %v; want ErrNoTransaction", err)
	}
	stop1 := run(sub1, pub1)
	<-quarter // a quarter was handled by the first pair
	sub2, pub2 := openPair(t, c, group, unique("tx"))
	stop2 := run(sub2, pub2)
	waitCommitted(t, c, group, in, n)
	stop1()
	stop2()
	t.Logf("%d deliveries again after aborted transactions", redelivered.Load())
	if d := checkOnce(t, c, out, "read_committed", want); d != 0 {
		t.Fatalf("read_committed: %d duplicates", d)
	}
}

// TestExactlyOnceAttempts: a record of an aborted transaction is delivered
// again with the next attempt, to the same subscription (a nack aborts the
// transaction) and to a later pair of the group in this process (the
// first pair's subscription ends while it holds the record unacked, which
// aborts the transaction).
func TestExactlyOnceAttempts(t *testing.T) {
	c := newCluster(t)
	topic, group := unique("in"), unique("g")
	c.createTopic(t, topic, 1)
	src := relaytest.OpenPublisher(t, c.url())
	if err := src.Publish(context.Background(), topic, idsMsgs("a")...); err != nil {
		t.Fatal(err)
	}
	sub, pub := openPair(t, c, group, unique("tx"))
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 2; want++ {
		m := recv(t, ch)
		if m.ID != "a" || m.Attempt() != want {
			t.Fatalf("delivery %d: %s attempt %d", want, m.ID, m.Attempt())
		}
		if want == 1 {
			_ = m.Nack()
		}
	}
	cancel() // the second delivery is left unacked
	for range ch {
	}
	_ = sub.Close()
	_ = pub.Close()

	sub2, _ := openPair(t, c, group, unique("tx"))
	ch2, err := sub2.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, ch2)
	if m.ID != "a" || m.Attempt() != 3 {
		t.Fatalf("after the first pair's end: %s attempt %d, want a attempt 3", m.ID, m.Attempt())
	}
	_ = m.Ack()
}
