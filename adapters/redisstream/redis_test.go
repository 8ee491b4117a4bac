package redisstream_test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// provision is relaytest.Provision with this suite's 10s limit.
func provision(t testing.TB, s relay.Subscriber, topic string) {
	t.Helper()
	relaytest.ProvisionWithin(t, s.(relay.Provisioner), topic, 10*time.Second)
}

func newMsgs(n int, format string) []*relay.Message {
	out := make([]*relay.Message, n)
	for i := range out {
		out[i] = relay.NewMessage([]byte(fmt.Sprintf(format, i)))
	}
	return out
}

func pendingCount(t testing.TB, c *redis.Client, stream, group string) int64 {
	t.Helper()
	p, err := c.XPending(context.Background(), stream, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

// A consumer that read entries and died without acking them: once they
// have been idle for claim_idle, a relay subscriber of the group takes
// them over and sees Attempt 2.
func TestEntriesOfDeadConsumerAreTakenOver(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("dead"), relaytest.Unique("g")
	raw := rawClient(t)
	pub := openPub(t)
	sub := openSub(t, group, "claim_idle", "300ms", "claim_every", "100ms")
	provision(t, sub, topic)
	msgs := newMsgs(3, "orphan %d")
	relaytest.Publish(t, pub, topic, msgs...)

	res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "dead-worker", Streams: []string{topic, ">"}, Count: 10, Block: -1}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 3 {
		t.Fatalf("raw consumer read %v, %v", res, err)
	}

	ch, _ := relaytest.Subscribe(t, sub, topic)
	want := map[string]bool{}
	for _, m := range msgs {
		want[m.ID] = true
	}
	for range msgs {
		m := relaytest.Next(t, ch, "entry of the dead consumer")
		if !want[m.ID] {
			t.Fatalf("unexpected or duplicate message %s", m.ID)
		}
		delete(want, m.ID)
		if m.Attempt() != 2 {
			t.Errorf("message %s: Attempt %d, want 2", m.ID, m.Attempt())
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	_ = sub.Close()
	if n := pendingCount(t, raw, topic, group); n != 0 {
		t.Errorf("%d entries still pending after acks", n)
	}
}

// A process restarted with the same consumer name takes its own pending
// entries back at once, without waiting for claim_idle.
func TestOwnPendingEntriesAreResumedAtOnce(t *testing.T) {
	ctx := context.Background()
	topic, group, name := relaytest.Unique("own"), relaytest.Unique("g"), relaytest.Unique("worker")
	raw := rawClient(t)
	pub := openPub(t)
	sub := openSub(t, group, "consumer", name, "claim_idle", "1h")
	provision(t, sub, topic)
	msgs := newMsgs(2, "mine %d")
	relaytest.Publish(t, pub, topic, msgs...)
	if err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: name, Streams: []string{topic, ">"}, Count: 10, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	ch, _ := relaytest.Subscribe(t, sub, topic)
	for i := range msgs {
		m := relaytest.Next(t, ch, "own pending entry")
		if m.ID != msgs[i].ID || m.Attempt() != 2 {
			t.Errorf("got %s attempt %d, want %s attempt 2", m.ID, m.Attempt(), msgs[i].ID)
		}
		_ = m.Ack()
	}
}

// TestCrashHelper is the body of the subscriber process that
// TestKilledSubscriberProcess kills. It does nothing in a normal run.
func TestCrashHelper(t *testing.T) {
	if os.Getenv("RELAY_REDIS_CRASH_HELPER") != "1" {
		return
	}
	url, topic := os.Getenv("RELAY_REDIS_CRASH_URL"), os.Getenv("RELAY_REDIS_CRASH_TOPIC")
	sub, err := relay.OpenSubscriber(context.Background(), url)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for i := 0; i < 3; i++ {
		m := <-ch
		fmt.Println("held", m.ID)
	}
	time.Sleep(time.Hour) // killed by the parent, never acks
}

// A subscriber process killed with unacked messages: another subscriber of
// the group receives them with Attempt 2 after claim_idle.
func TestKilledSubscriberProcess(t *testing.T) {
	topic, group := relaytest.Unique("killed"), relaytest.Unique("g")
	pub := openPub(t)
	sub := openSub(t, group, "claim_idle", "500ms", "claim_every", "100ms")
	provision(t, sub, topic)
	msgs := newMsgs(3, "in a dying process %d")
	relaytest.Publish(t, pub, topic, msgs...)

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RELAY_REDIS_CRASH_HELPER=1",
		"RELAY_REDIS_CRASH_URL="+testenv.WithParams(redisURL(t), "group", group, "consumer", "doomed", "claim_idle", "500ms"),
		"RELAY_REDIS_CRASH_TOPIC="+topic)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	sc := bufio.NewScanner(out)
	for len(held) < 3 && sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "held "); ok {
			held[id] = true
		} else if strings.HasPrefix(sc.Text(), "error") {
			t.Fatalf("helper: %s", sc.Text())
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(held) != 3 {
		t.Fatalf("helper held %d messages before it was killed, want 3", len(held))
	}

	ch, _ := relaytest.Subscribe(t, sub, topic)
	for range msgs {
		m := relaytest.Next(t, ch, "message of the killed process")
		if !held[m.ID] {
			t.Fatalf("unexpected or duplicate message %s", m.ID)
		}
		delete(held, m.ID)
		if m.Attempt() != 2 {
			t.Errorf("message %s: Attempt %d, want 2", m.ID, m.Attempt())
		}
		_ = m.Ack()
	}
}

// While a handler works on a message for many times claim_idle, lease
// extension keeps the other consumer of the group from taking it.
func TestLeaseExtensionKeepsSlowMessage(t *testing.T) {
	topic, group := relaytest.Unique("lease"), relaytest.Unique("g")
	pub := openPub(t)
	s1 := openSub(t, group, "claim_idle", "300ms", "claim_every", "50ms")
	s2 := openSub(t, group, "claim_idle", "300ms", "claim_every", "50ms")
	provision(t, s1, topic)
	ch1, _ := relaytest.Subscribe(t, s1, topic)
	m := relay.NewMessage([]byte("slow work"))
	relaytest.Publish(t, pub, topic, m)
	got := relaytest.Next(t, ch1, "slow message")
	ch2, _ := relaytest.Subscribe(t, s2, topic) // an eager competitor, claiming every 50ms

	if other := relaytest.Quiet(ch2, 1500*time.Millisecond); other != nil { // the handler works for 5× claim_idle
		t.Fatalf("message %s (attempt %d) delivered to the other consumer while still being handled", other.ID, other.Attempt())
	}
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan *relay.Message{ch1, ch2} {
		if extra := relaytest.Quiet(ch, 300*time.Millisecond); extra != nil {
			t.Errorf("acked message delivered again (%s, attempt %d)", extra.ID, extra.Attempt())
		}
	}
}

// Redis restarted (without persistence) in the middle of a stream: the
// publisher waits for it, the subscription reconnects, recreates its group
// and goes on.
func TestRedisRestartMidStream(t *testing.T) {
	if why := canRestart(t); why != "" {
		t.Skipf("SKIP: cannot restart Redis: %s", why)
	}
	topic, group := relaytest.Unique("restart"), relaytest.Unique("g")
	pub := openPub(t)
	sub := openSub(t, group)
	provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	before := newMsgs(5, "before %d")
	relaytest.Publish(t, pub, topic, before...)
	for range before {
		_ = relaytest.Next(t, ch, "before the restart").Ack()
	}
	unacked := relay.NewMessage([]byte("in flight during the restart"))
	relaytest.Publish(t, pub, topic, unacked)
	inFlight := relaytest.Next(t, ch, "in flight")

	stopRedis(t)
	during := newMsgs(5, "published while Redis is down %d")
	published := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		published <- pub.Publish(ctx, topic, during...)
	}()
	hc := pub.(relay.HealthChecker)
	for i := 0; i < 200 && hc.Health() == nil; i++ { // let the publisher meet the outage
		time.Sleep(50 * time.Millisecond)
	}
	if hc.Health() == nil {
		t.Error("publisher reports healthy while Redis is down and a publish is retrying")
	}
	startRedis(t)
	if err := <-published; err != nil {
		t.Fatalf("Publish across the restart: %v", err)
	}
	if err := hc.Health(); err != nil {
		t.Errorf("publisher unhealthy after a publish went through: %v", err)
	}
	// The entry in flight is gone with the server's memory: settling it
	// must neither block nor fail.
	if err := inFlight.Ack(); err != nil {
		t.Errorf("Ack of a message from before the restart: %v", err)
	}
	want := map[string]bool{}
	for _, m := range during {
		want[m.ID] = true
	}
	for len(want) > 0 {
		m := relaytest.Next(t, ch, "after the restart")
		delete(want, m.ID)
		_ = m.Ack()
	}
	after := relay.NewMessage([]byte("after"))
	relaytest.Publish(t, pub, topic, after)
	if m := relaytest.Next(t, ch, "after"); m.ID != after.ID {
		t.Errorf("got %s, want %s", m.ID, after.ID)
	}
}

// A deleted group (XGROUP DESTROY) is recreated by the subscription, which
// goes on receiving.
func TestDestroyedGroupIsRecreated(t *testing.T) {
	topic, group := relaytest.Unique("nogroup"), relaytest.Unique("g")
	raw := rawClient(t)
	pub := openPub(t)
	sub := openSub(t, group)
	provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	first := relay.NewMessage([]byte("first"))
	relaytest.Publish(t, pub, topic, first)
	_ = relaytest.Next(t, ch, "first").Ack()
	if err := raw.XGroupDestroy(context.Background(), topic, group).Err(); err != nil {
		t.Fatal(err)
	}
	second := relay.NewMessage([]byte("second"))
	relaytest.Publish(t, pub, topic, second)
	for {
		m := relaytest.Next(t, ch, "after the group was destroyed")
		_ = m.Ack()
		if m.ID == second.ID {
			break
		}
		if m.ID != first.ID { // the group is recreated from 0: first may come again
			t.Fatalf("unexpected message %s", m.ID)
		}
	}
}

// Entries written by other producers, with arbitrary fields, are delivered
// and never stop the subscription.
func TestForeignEntries(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("foreign"), relaytest.Unique("g")
	raw := rawClient(t)
	pub := openPub(t)
	sub := openSub(t, group)
	provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)

	type want struct {
		id      string // "" = the stream entry ID
		key     string
		payload string
		md      relay.Metadata
	}
	cases := []struct {
		fields []any
		want   want
	}{
		{[]any{"data", "hello", "source", "legacy"}, want{payload: "hello", md: relay.Metadata{"source": "legacy"}}},
		{[]any{"body", "\x00\xff binary"}, want{payload: "\x00\xff binary"}},
		{[]any{"user", "42", "action", "login"}, want{md: relay.Metadata{"user": "42", "action": "login"}}},
		{[]any{"id", "ext-1", "key", "k", "payload", "p", "md:a", "1", "extra", "e", "data", "d"},
			want{id: "ext-1", key: "k", payload: "p", md: relay.Metadata{"a": "1", "extra": "e", "data": "d"}}},
		{[]any{"_watermill_message_uuid", "u-1", "payload", "wm", "metadata", "\x81\xa1a\xa1b"},
			want{payload: "wm", md: relay.Metadata{"_watermill_message_uuid": "u-1", "metadata": "\x81\xa1a\xa1b"}}},
	}
	entryIDs := make([]string, len(cases))
	for i, c := range cases {
		id, err := raw.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: c.fields}).Result()
		if err != nil {
			t.Fatal(err)
		}
		entryIDs[i] = id
	}
	own := relay.NewMessage([]byte("relay's own, after the foreign ones"))
	relaytest.Publish(t, pub, topic, own)

	for i, c := range cases {
		m := relaytest.Next(t, ch, "foreign entry")
		wantID := c.want.id
		if wantID == "" {
			wantID = entryIDs[i]
		}
		if m.ID != wantID || m.Key != c.want.key || string(m.Payload) != c.want.payload || !maps.Equal(m.Metadata, c.want.md) {
			t.Errorf("entry %v: got ID %q key %q payload %q md %q; want %q %q %q %q",
				c.fields, m.ID, m.Key, m.Payload, m.Metadata, wantID, c.want.key, c.want.payload, c.want.md)
		}
		_ = m.Ack()
	}
	if m := relaytest.Next(t, ch, "relay message after foreign ones"); m.ID != own.ID {
		t.Errorf("got %s, want %s", m.ID, own.ID)
	}
}

// The entry relay writes is readable with redis-cli XRANGE: plain fields
// id, key, payload and md:<name>.
func TestEntryLayout(t *testing.T) {
	topic := relaytest.Unique("layout")
	raw := rawClient(t)
	pub := openPub(t)
	m := &relay.Message{ID: relay.NewID(), Key: "order-7", Payload: []byte(`{"total":12}`), Metadata: relay.Metadata{"type": "order.created", "trace": "abc"}}
	relaytest.Publish(t, pub, topic, m)
	res, err := raw.Do(context.Background(), "XRANGE", topic, "-", "+").Slice()
	if err != nil || len(res) != 1 {
		t.Fatalf("XRANGE: %v %v", res, err)
	}
	var fields []string
	for _, f := range res[0].([]any)[1].([]any) {
		fields = append(fields, f.(string))
	}
	want := []string{"id", m.ID, "key", "order-7", "payload", `{"total":12}`, "md:trace", "abc", "md:type", "order.created"}
	if !slices.Equal(fields, want) {
		t.Errorf("entry fields %q, want %q", fields, want)
	}
}

// Consumer names are unique per subscription within the process, and a
// subscription that ends cleanly removes its consumer from the group.
func TestConsumerNamesAndCleanup(t *testing.T) {
	ctx := context.Background()
	topic, group, name := relaytest.Unique("names"), relaytest.Unique("g"), relaytest.Unique("svc")
	raw := rawClient(t)
	sub := openSub(t, group, "consumer", name)
	provision(t, sub, topic)
	relaytest.Subscribe(t, sub, topic)
	relaytest.Subscribe(t, sub, topic)
	var names []string
	for i := 0; i < 100 && len(names) < 2; i++ {
		time.Sleep(20 * time.Millisecond) // consumers appear with their first read
		cs, err := raw.XInfoConsumers(ctx, topic, group).Result()
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, c := range cs {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	if want := []string{name, name + "-2"}; !slices.Equal(names, want) {
		t.Errorf("consumers %q, want %q", names, want)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	cs, err := raw.XInfoConsumers(ctx, topic, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Errorf("consumers left after Close: %+v", cs)
	}
}

// A pending entry deleted from the stream (trimmed) is acknowledged and
// skipped when claimed, instead of being claimed for ever.
func TestTrimmedPendingEntryIsDropped(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("trimmed"), relaytest.Unique("g")
	raw := rawClient(t)
	pub := openPub(t)
	sub := openSub(t, group, "claim_idle", "100ms", "claim_every", "50ms")
	provision(t, sub, topic)
	msgs := newMsgs(2, "pending %d")
	relaytest.Publish(t, pub, topic, msgs...)
	res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "gone", Streams: []string{topic, ">"}, Count: 10, Block: -1}).Result()
	if err != nil || len(res[0].Messages) != 2 {
		t.Fatalf("raw read: %v %v", res, err)
	}
	if err := raw.XDel(ctx, topic, res[0].Messages[0].ID).Err(); err != nil {
		t.Fatal(err)
	}
	ch, _ := relaytest.Subscribe(t, sub, topic)
	m := relaytest.Next(t, ch, "surviving entry")
	if m.ID != msgs[1].ID {
		t.Fatalf("got %s, want %s", m.ID, msgs[1].ID)
	}
	_ = m.Ack()
	if extra := relaytest.Quiet(ch, 300*time.Millisecond); extra != nil {
		t.Errorf("unexpected delivery %s", extra.ID)
	}
	_ = sub.Close()
	if n := pendingCount(t, raw, topic, group); n != 0 {
		t.Errorf("%d entries still pending", n)
	}
}

// start=0 (default) gives a new group the retained stream; start=$ only
// what is published after the group exists.
func TestStartPosition(t *testing.T) {
	topic := relaytest.Unique("start")
	pub := openPub(t)
	old := relay.NewMessage([]byte("before any group"))
	relaytest.Publish(t, pub, topic, old)

	oldest := openSub(t, relaytest.Unique("g"))
	newest := openSub(t, relaytest.Unique("g"), "start", "$")
	chO, _ := relaytest.Subscribe(t, oldest, topic)
	chN, _ := relaytest.Subscribe(t, newest, topic)
	fresh := relay.NewMessage([]byte("after the groups"))
	relaytest.Publish(t, pub, topic, fresh)
	if m := relaytest.Next(t, chO, "start=0"); m.ID != old.ID {
		t.Errorf("start=0: first message %s, want the old one %s", m.ID, old.ID)
	}
	if m := relaytest.Next(t, chN, "start=$"); m.ID != fresh.ID {
		t.Errorf("start=$: first message %s, want the new one %s", m.ID, fresh.ID)
	}
}

// maxlen= trims the stream on publish.
func TestMaxLenTrims(t *testing.T) {
	topic := relaytest.Unique("maxlen")
	raw := rawClient(t)
	pub := openPub(t, "maxlen", "100")
	for i := 0; i < 10; i++ {
		relaytest.Publish(t, pub, topic, newMsgs(100, "m%d")...)
	}
	n, err := raw.XLen(context.Background(), topic).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 || n >= 1000 {
		t.Errorf("XLEN %d after 1000 publishes with maxlen=100 (approximate trimming keeps at least 100)", n)
	}
}

// A caller-supplied client is not closed by the publisher or subscriber.
func TestCallerClientStaysOpen(t *testing.T) {
	ctx := context.Background()
	c := rawClient(t)
	p, err := redisstream.NewPublisher(ctx, c, redisstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := redisstream.NewSubscriber(ctx, c, redisstream.SubscriberConfig{Group: relaytest.Unique("g")})
	if err != nil {
		t.Fatal(err)
	}
	topic := relaytest.Unique("own-client")
	provision(t, s, topic)
	ch, _ := relaytest.Subscribe(t, s, topic)
	m := relay.NewMessage([]byte("x"))
	relaytest.Publish(t, p, topic, m)
	_ = relaytest.Next(t, ch, "via caller client").Ack()
	_ = p.Close()
	_ = s.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("caller's client unusable after Close: %v", err)
	}
}

// Consumers left by crashed processes (no pending entries, idle longer than
// consumer_ttl) are removed; one that still holds an entry is kept.
func TestIdleConsumersAreRemoved(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("stale"), relaytest.Unique("g")
	raw := rawClient(t)
	pub := openPub(t)
	sub := openSub(t, group, "consumer_ttl", "300ms", "claim_idle", "1h", "claim_every", "100ms")
	provision(t, sub, topic)
	relaytest.Publish(t, pub, topic, relay.NewMessage([]byte("held by busy")))
	if err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "busy", Streams: []string{topic, ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := raw.XGroupCreateConsumer(ctx, topic, group, "crashed").Result(); err != nil || n != 1 {
		t.Fatalf("XGROUP CREATECONSUMER: %d, %v", n, err)
	}
	time.Sleep(400 * time.Millisecond) // both idle longer than consumer_ttl
	relaytest.Subscribe(t, sub, topic)
	var names []string
	for i := 0; i < 300; i++ {
		cs, err := raw.XInfoConsumers(ctx, topic, group).Result()
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, c := range cs {
			names = append(names, c.Name)
		}
		if !slices.Contains(names, "crashed") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if slices.Contains(names, "crashed") {
		t.Errorf("idle consumer without pending entries not removed: %q", names)
	}
	if !slices.Contains(names, "busy") {
		t.Errorf("consumer holding an entry was removed: %q", names)
	}
}

// maxage= trims entries older than the age on every XADD (MINID ~): whole
// nodes of old entries go, the new one stays.
func TestMaxAgeTrims(t *testing.T) {
	ctx := context.Background()
	topic := relaytest.Unique("maxage")
	raw := rawClient(t)
	t.Cleanup(func() { raw.Del(ctx, topic) })
	const old = 250 // several of the stream's nodes (100 entries each by default)
	for i := 1; i <= old; i++ {
		if err := raw.XAdd(ctx, &redis.XAddArgs{Stream: topic, ID: fmt.Sprintf("1-%d", i), Values: []any{"payload", "old"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	pub := openPub(t, "maxage", "1h")
	m := relay.NewMessage([]byte("new"))
	relaytest.Publish(t, pub, topic, m)
	n, err := raw.XLen(ctx, topic).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n > old {
		t.Errorf("XLEN %d after publishing with maxage=1h beside %d entries from 1970: nothing was trimmed", n, old)
	}
	last, err := raw.XRevRangeN(ctx, topic, "+", "-", 1).Result()
	if err != nil || len(last) != 1 || last[0].Values[redisstream.FieldID] != m.ID {
		t.Fatalf("newest entry %v (%v), want the published message %s", last, err, m.ID)
	}
}
