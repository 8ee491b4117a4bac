package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := rawPool(t).QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPublishBeforeGroup: a message published while the topic has no
// group is not kept (no row at all); Provision makes the group keep what
// is published afterwards, before its first Subscribe, and Lag counts it.
func TestPublishBeforeGroup(t *testing.T) {
	ctx := context.Background()
	pub := openPub(t)
	topic, group := relaytest.Unique("before"), relaytest.Unique("g")
	early := relay.NewMessage([]byte("before the group"))
	if err := pub.Publish(ctx, topic, early); err != nil {
		t.Fatal(err)
	}
	if n := count(t, "SELECT count(*) FROM "+table("messages")+" WHERE topic = $1", topic); n != 0 {
		t.Fatalf("%d message rows for a topic without groups, want 0", n)
	}
	sub := openSub(t, group)
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	late := relay.NewMessage([]byte("after Provision"))
	if err := pub.Publish(ctx, topic, late); err != nil {
		t.Fatal(err)
	}
	lag, err := sub.(relay.LagReporter).Lag(ctx, topic)
	if err != nil || lag != 1 {
		t.Fatalf("Lag = %d, %v; want 1", lag, err)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := next(t, ch)
	if m.ID != late.ID {
		t.Fatalf("got %q, want the message published after Provision %q", m.ID, late.ID)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lag 0 after the ack", func() bool {
		lag, err := sub.(relay.LagReporter).Lag(ctx, topic)
		return err == nil && lag == 0
	})
}

// TestRetention: a message row stays while any group still needs it and
// is deleted once every group acked it.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	topic := relaytest.Unique("retention")
	a, b := openSub(t, relaytest.Unique("a")), openSub(t, relaytest.Unique("b"))
	for _, s := range []relay.Subscriber{a, b} {
		if err := s.(relay.Provisioner).Provision(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	m := relay.NewMessage([]byte("x"))
	if err := openPub(t).Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	rows := func() int {
		return count(t, "SELECT count(*) FROM "+table("messages")+" WHERE relay_id = $1", m.ID)
	}
	if n := rows(); n != 1 {
		t.Fatalf("%d message rows for one message and two groups, want 1", n)
	}
	if n := count(t, "SELECT count(*) FROM "+table("deliveries")+" WHERE topic = $1", topic); n != 2 {
		t.Fatalf("%d delivery rows for two groups, want 2", n)
	}
	ack := func(s relay.Subscriber) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := s.Subscribe(sctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if err := next(t, ch).Ack(); err != nil {
			t.Fatal(err)
		}
		cancel()
		for range ch { // closed once the ack reached the database
		}
	}
	ack(a)
	if n := rows(); n != 1 {
		t.Fatalf("%d message rows after one of two groups acked, want 1", n)
	}
	ack(b)
	if n := rows(); n != 0 {
		t.Fatalf("%d message rows after both groups acked, want 0", n)
	}
}

// TestRetentionConcurrentGroups: several groups acking the same messages
// at the same time leave no message row behind (each ack removes what no
// group needs in its own transaction; without the row lock two groups
// committing together would each see the other's delivery row and keep
// the message). All subscriptions start before any ack, so that the
// sweep at Subscribe cannot hide a leftover.
func TestRetentionConcurrentGroups(t *testing.T) {
	const groups, total = 6, 400
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic := relaytest.Unique("retention-concurrent")
	var chans []<-chan *relay.Message
	for range groups {
		s := openSub(t, relaytest.Unique("g"), "inflight", "16")
		if err := s.(relay.Provisioner).Provision(ctx, topic); err != nil {
			t.Fatal(err)
		}
		ch, err := s.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	pub := openPub(t)
	for i := 0; i < total; i += 20 {
		batch := make([]*relay.Message, 20)
		for j := range batch {
			batch[j] = relay.NewMessage([]byte("m"))
		}
		if err := pub.Publish(ctx, topic, batch...); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range total {
				if err := next(t, ch).Ack(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	for _, ch := range chans {
		for range ch { // closed once its acks are in the database
		}
	}
	if n := count(t, "SELECT count(*) FROM "+table("deliveries")+" WHERE topic = $1", topic); n != 0 {
		t.Fatalf("%d delivery rows left after every group acked everything", n)
	}
	if n := count(t, "SELECT count(*) FROM "+table("messages")+" WHERE topic = $1", topic); n != 0 {
		t.Fatalf("%d of %d message rows left after every group acked them", n, total)
	}
}

// TestNotifyWakes: with polling practically off, a subscription waiting
// for messages receives one published later, a nacked one again, and one
// released by another subscription of the group: the wake-ups come from
// NOTIFY.
func TestNotifyWakes(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("notify"), relaytest.Unique("g")
	sub := openSub(t, group, "poll", "1h")
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	pub := openPub(t)
	for i := range 3 {
		// Let the receiver go idle first, so that it has to be woken.
		waitFor(t, "an idle receiver", func() bool {
			return count(t, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'") > 0
		})
		m := relay.NewMessage([]byte{byte(i)})
		if err := pub.Publish(ctx, topic, m); err != nil {
			t.Fatal(err)
		}
		got := next(t, ch)
		if got.ID != m.ID {
			t.Fatalf("got %q, want %q", got.ID, m.ID)
		}
		if err := got.Nack(); err != nil {
			t.Fatal(err)
		}
		again := next(t, ch)
		if again.ID != m.ID || again.Attempt() != 2 {
			t.Fatalf("after Nack got %q attempt %d, want %q attempt 2", again.ID, again.Attempt(), m.ID)
		}
		if err := again.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	// Released by another subscriber of the group when its subscription ends.
	other := openSub(t, group, "poll", "1h")
	octx, cancel := context.WithCancel(ctx)
	och, err := other.Subscribe(octx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage([]byte("released"))
	if err := pub.Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	var first *relay.Message
	select {
	case first = <-och:
		cancel()
		for range och {
		}
		got := next(t, ch)
		if got.ID != m.ID || got.Attempt() != 2 {
			t.Fatalf("after release got %q attempt %d, want %q attempt 2", got.ID, got.Attempt(), m.ID)
		}
		_ = got.Ack()
	case first = <-ch:
		cancel()
		_ = first.Ack()
	}
	if first.ID != m.ID {
		t.Fatalf("got %q, want %q", first.ID, m.ID)
	}
}

// TestNackAfterNative: a delayed Nack survives the subscriber's Close
// (the delay is the row's visible_at), and the attempt count survives too.
func TestNackAfterNative(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("delay"), relaytest.Unique("g")
	sub := openSub(t, group)
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage([]byte("later"))
	if err := openPub(t).Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	got := next(t, ch)
	const delay = 2 * time.Second
	nacked := time.Now()
	if err := got.NackAfter(delay); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	var visible time.Time
	if err := rawPool(t).QueryRow(ctx, "SELECT visible_at FROM "+table("deliveries")+" WHERE topic = $1", topic).Scan(&visible); err != nil {
		t.Fatal(err)
	}
	if visible.Before(nacked.Add(delay - 500*time.Millisecond)) {
		t.Fatalf("visible_at %v is not about %v after the nack (%v): the delay did not hold across Close", visible, delay, nacked)
	}
	ch2, err := openSub(t, group).Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	again := next(t, ch2)
	if again.ID != m.ID || again.Attempt() != 2 {
		t.Fatalf("got %q attempt %d, want %q attempt 2", again.ID, again.Attempt(), m.ID)
	}
	_ = again.Ack()
}

// TestTextLimits: what PostgreSQL text cannot store is refused before
// anything is written, with a *relay.LimitError naming the field.
func TestTextLimits(t *testing.T) {
	pub := openPub(t)
	for name, m := range map[string]*relay.Message{
		"metadata value": {Metadata: relay.Metadata{"k": "a\x00b"}},
		"metadata key":   {Metadata: relay.Metadata{"\xff": "v"}},
		"key":            {Key: "a\x00"},
	} {
		err := pub.Publish(context.Background(), relaytest.Unique("text"), m)
		var le *relay.LimitError
		if !errors.As(err, &le) || le.What != name {
			t.Errorf("%s: err = %v, want a *relay.LimitError about the %s", name, err, name)
		}
	}
	err := pub.Publish(context.Background(), "bad\x00topic", relay.NewMessage(nil))
	if !errors.Is(err, relay.ErrInvalidTopic) {
		t.Errorf("topic with NUL: err = %v, want relay.ErrInvalidTopic", err)
	}
}

// TestSchemaSQL: the shipped file is what the adapter runs; applied by
// hand it is idempotent and makes the tables the adapter uses.
func TestSchemaSQL(t *testing.T) {
	ddl, err := postgres.SchemaFor("relay_test_ddl")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ddl, postgres.SchemaPlaceholder) || !strings.Contains(ddl, `"relay_test_ddl".deliveries`) {
		t.Fatalf("SchemaFor left the placeholder or did not name the schema:\n%s", ddl)
	}
	pool := rawPool(t)
	ctx := context.Background()
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS relay_test_ddl CASCADE`) })
	for range 2 {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'relay_test_ddl'"); n != 3 {
		t.Fatalf("%d tables, want 3 (groups, messages, deliveries)", n)
	}
	if _, err := postgres.SchemaFor(`x"; DROP TABLE y; --`); err == nil {
		t.Fatal("SchemaFor accepted a schema name that is not a plain identifier")
	}
}

// TestOpenWhileWriting: opening a publisher, and a subscriber's
// Provision, on an existing schema take no lock on relay's tables, so they
// neither wait for a writer's open transaction nor deadlock against
// publishes and acks (CREATE INDEX IF NOT EXISTS takes a SHARE lock before
// it finds the index; under load that deadlocked, SQLSTATE 40P01).
func TestOpenWhileWriting(t *testing.T) {
	openPub(t) // the schema exists
	ctx := context.Background()
	tx, err := rawPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// What every open publish or ack transaction holds until it ends.
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table("messages")+", "+table("deliveries")+" IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := relay.OpenPublisher(octx, pgURL(t))
	if err != nil {
		t.Fatalf("opening a publisher while a write transaction is open: %v", err)
	}
	_ = p.Close()
	s, err := relay.OpenSubscriber(octx, testenv.WithParams(pgURL(t), "group", relaytest.Unique("g")))
	if err != nil {
		t.Fatalf("opening a subscriber while a write transaction is open: %v", err)
	}
	defer s.Close()
	if err := s.(relay.Provisioner).Provision(octx, relaytest.Unique("t")); err != nil {
		t.Fatalf("Provision while a write transaction is open: %v", err)
	}
}

// TestEnsureSchemaRepairs: a schema missing one of its indexes is
// completed, not taken as existing.
func TestEnsureSchemaRepairs(t *testing.T) {
	const schema = "relay_test_repair"
	pool := rawPool(t)
	ctx := context.Background()
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS relay_test_repair CASCADE`) })
	if err := postgres.EnsureSchema(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	for _, index := range []string{"deliveries_message_id", "messages_topic_id"} {
		if _, err := pool.Exec(ctx, "DROP INDEX "+schema+"."+index); err != nil {
			t.Fatal(err)
		}
		if err := postgres.EnsureSchema(ctx, pool, schema); err != nil {
			t.Fatal(err)
		}
		if n := count(t, "SELECT count(*) FROM pg_indexes WHERE schemaname = '"+schema+"' AND indexname = '"+index+"'"); n != 1 {
			t.Fatalf("index %s not recreated (%d)", index, n)
		}
	}
	if _, err := pool.Exec(ctx, "DROP TABLE "+schema+".groups"); err != nil {
		t.Fatal(err)
	}
	if err := postgres.EnsureSchema(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if n := count(t, "SELECT count(*) FROM information_schema.tables WHERE table_schema = '"+schema+"'"); n != 3 {
		t.Fatalf("%d tables after repair, want 3", n)
	}
}

func TestDecodeMetadata(t *testing.T) {
	got := postgres.DecodeMetadata([]string{"a", "b", "a", "a", "a#2"}, []string{"1", "2", "3", "4", "5"})
	want := relay.Metadata{"a": "1", "b": "2", "a#2": "5", "a#3": "3", "a#4": "4"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	if md := postgres.DecodeMetadata(nil, nil); len(md) != 0 {
		t.Fatalf("empty arrays gave %q", md)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAcksReachDatabaseWhileRunning: acks are sent with the claim that
// follows them (see receiver.Settle); with polling practically off, an
// ack made once everything is claimed, and an ack followed by a Nack,
// remove their rows while the subscription runs. (That a waiting claim
// is woken for them is TestSettleWakesWaitingReceive.)
func TestAcksReachDatabaseWhileRunning(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic, group := relaytest.Unique("acks-running"), relaytest.Unique("g")
	sub := openSub(t, group, "poll", "1h")
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	pub := openPub(t)
	msgs := []*relay.Message{relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b")), relay.NewMessage([]byte("c"))}
	if err := pub.Publish(ctx, topic, msgs...); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var got []*relay.Message
	for range msgs {
		got = append(got, next(t, ch))
	}
	pool := rawPool(t)
	countOf := func(query string, args ...any) int {
		var n int
		if err := pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	rowsOf := func(ids ...string) int {
		return countOf("SELECT count(*) FROM "+table("messages")+" WHERE topic = $1 AND relay_id = ANY($2)", topic, ids)
	}
	deliveries := func() int {
		return countOf("SELECT count(*) FROM "+table("deliveries")+" WHERE topic = $1", topic)
	}
	// The receiver has claimed everything and waits for a notification.
	if err := got[0].Ack(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "message row removed after an ack while idle", func() bool { return rowsOf(got[0].ID) == 0 })
	if n := deliveries(); n != 2 {
		t.Fatalf("%d delivery rows after one of three acks, want 2", n)
	}
	if err := got[1].Ack(); err != nil {
		t.Fatal(err)
	}
	if err := got[2].Nack(); err != nil {
		t.Fatal(err)
	}
	again := next(t, ch)
	if again.ID != got[2].ID || again.Attempt() != 2 {
		t.Fatalf("after the nack got %s attempt %d, want %s attempt 2", again.ID, again.Attempt(), got[2].ID)
	}
	waitFor(t, "message row removed after an ack followed by a nack", func() bool { return rowsOf(got[1].ID) == 0 })
	if n := deliveries(); n != 1 {
		t.Fatalf("%d delivery rows with one message unsettled, want 1", n)
	}
	if err := again.Ack(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every row removed", func() bool { return deliveries() == 0 && rowsOf(got[2].ID) == 0 })
	cancel()
	for range ch {
	}
}

// TestSubscribeSweepsLeftoverRows: message rows that no group needs (left
// by a group whose delivery rows were deleted by hand) at the head of a
// topic are deleted by the next Subscribe; the rows a group still needs
// stay and are delivered.
func TestSubscribeSweepsLeftoverRows(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic, group, dropped := relaytest.Unique("sweep"), relaytest.Unique("g"), relaytest.Unique("dropped")
	sub := openSub(t, group)
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	pool := rawPool(t)
	// Five messages only the dropped group had, then two for both.
	if _, err := pool.Exec(ctx, rawGroup, topic, dropped); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM "+table("groups")+" WHERE topic = $1 AND name = $2", topic, group); err != nil {
		t.Fatal(err)
	}
	pub := openPub(t)
	for range 5 {
		if err := pub.Publish(ctx, topic, relay.NewMessage([]byte("left over"))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, rawGroup, topic, group); err != nil {
		t.Fatal(err)
	}
	kept := []*relay.Message{relay.NewMessage([]byte("kept 1")), relay.NewMessage([]byte("kept 2"))}
	if err := pub.Publish(ctx, topic, kept...); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM "+table("deliveries")+" WHERE topic = $1 AND group_name = $2", topic, dropped); err != nil {
		t.Fatal(err)
	}
	messages := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table("messages")+" WHERE topic = $1", topic).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := messages(); n != 7 {
		t.Fatalf("%d message rows before Subscribe, want 7", n)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if n := messages(); n != 2 {
		t.Fatalf("%d message rows after Subscribe, want the 2 the group needs", n)
	}
	for _, w := range kept {
		if m := next(t, ch); m.ID != w.ID {
			t.Fatalf("got %s (%s), want %s", m.ID, m.Payload, w.ID)
		}
	}
	cancel()
	for range ch {
	}
}
