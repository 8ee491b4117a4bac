package redislist_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
)

// fixture opens a publisher and a subscriber of group on the test server
// (extra URL parameters in params) and a plain client for inspecting keys.
type fixture struct {
	pub    relay.Publisher
	sub    relay.Subscriber
	rc     *redis.Client
	prefix string
}

func newFixture(t *testing.T, group string, params ...string) *fixture {
	t.Helper()
	base := testURL(t)
	u, _ := url.Parse(base)
	q := u.Query()
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	u.RawQuery = q.Encode()
	f := &fixture{prefix: q.Get("prefix")}
	ctx := context.Background()
	var err error
	if f.pub, err = relay.OpenPublisher(ctx, u.String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.pub.Close() })
	if f.sub, err = relay.OpenSubscriber(ctx, withGroup(t, u.String(), group)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.sub.Close() })
	opts, _ := redis.ParseURL("redis://" + u.Host + u.Path)
	f.rc = redis.NewClient(opts)
	t.Cleanup(func() { _ = f.rc.Close() })
	return f
}

func next(t *testing.T, ch <-chan *relay.Message) *relay.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("subscription channel closed")
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
	}
	return nil
}

// The processing list of a consumer whose owner key expired (a process
// that died holding messages) goes back to its group when a subscription
// of the group starts, with the attempt counted up; that of a live
// consumer stays where it is, and Lag counts both.
func TestReclaimDeadConsumer(t *testing.T) {
	ctx := context.Background()
	const topic, group = "orders", "billing"
	f := newFixture(t, group)
	if err := f.sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	dead, alive := relay.NewMessage([]byte("held by a dead consumer")), relay.NewMessage([]byte("held by a live one"))
	if err := f.pub.Publish(ctx, topic, dead, alive); err != nil {
		t.Fatal(err)
	}
	list := f.prefix + topic + ":" + group
	base := list + ":"
	// What a consumer's receive does, by hand: one element each.
	for _, id := range []string{"dead", "alive"} {
		if err := f.rc.LMove(ctx, list, base+"processing:"+id, "LEFT", "RIGHT").Err(); err != nil {
			t.Fatal(err)
		}
		if err := f.rc.SAdd(ctx, base+"consumers", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.rc.Set(ctx, base+"owner:alive", "1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := f.sub.(relay.LagReporter).Lag(ctx, topic); err != nil || n != 2 {
		t.Fatalf("Lag = %d, %v; want 2 (both held)", n, err)
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := f.sub.Subscribe(sctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := next(t, ch)
	if m.ID != dead.ID || string(m.Payload) != string(dead.Payload) {
		t.Fatalf("got %s %q, want the dead consumer's message %s", m.ID, m.Payload, dead.ID)
	}
	if m.Attempt() != 2 {
		t.Errorf("reclaimed message: Attempt %d, want 2", m.Attempt())
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	if n, err := f.rc.LLen(ctx, base+"processing:alive").Result(); err != nil || n != 1 {
		t.Errorf("live consumer's processing list: %d elements, %v; want 1 (left alone)", n, err)
	}
	if ok, err := f.rc.SIsMember(ctx, base+"consumers", "dead").Result(); err != nil || ok {
		t.Errorf("dead consumer still in the consumer set (%v, %v)", ok, err)
	}
	// The ack reaches the broker; then only the live consumer's message is outstanding.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := f.sub.(relay.LagReporter).Lag(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lag = %d after the ack, want 1", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Cancelling a subscription that waits in BLMOVE ends the wait at once
// (CLIENT UNBLOCK), not after block=, and leaves no key of the consumer.
func TestCancelEndsBlockingWait(t *testing.T) {
	ctx := context.Background()
	const topic, group = "idle", "g"
	f := newFixture(t, group, "block", "10m", "lease", "30m")
	sctx, cancel := context.WithCancel(ctx)
	ch, err := f.sub.Subscribe(sctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	base := f.prefix + topic + ":" + group + ":"
	// Wait until the consumer is registered (its receive script ran), so
	// that the cancel lands while it waits in BLMOVE.
	for {
		n, err := f.rc.SCard(ctx, base+"consumers").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("unexpected message")
		}
	case <-time.After(time.Minute): // far below block=10m
		t.Fatal("the subscription did not end within a minute of its cancel; BLMOVE was not unblocked")
	}
	keys, err := f.rc.Keys(ctx, base+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("consumer keys left after the subscription ended: %q (%v)", keys, err)
	}
}

// A topic containing ':' is refused by both sides, since ':' separates the
// parts of the key names.
func TestTopicWithColon(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "g")
	if err := f.pub.Publish(ctx, "a:b", relay.NewMessage(nil)); !errorsIsInvalidTopic(err) {
		t.Errorf("Publish to a:b = %v, want ErrInvalidTopic", err)
	}
	if _, err := f.sub.Subscribe(ctx, "a:b"); !errorsIsInvalidTopic(err) {
		t.Errorf("Subscribe to a:b = %v, want ErrInvalidTopic", err)
	}
}

// An element that is not this adapter's encoding (a foreign producer) is
// delivered with its raw bytes as payload and the problem in metadata.
func TestPoisonElementDelivered(t *testing.T) {
	ctx := context.Background()
	const topic, group = "mixed", "g"
	f := newFixture(t, group)
	if err := f.sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := f.rc.RPush(ctx, f.prefix+topic+":"+group, "not relay's").Err(); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := f.sub.Subscribe(sctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := next(t, ch)
	if string(m.Payload) != "not relay's" || m.Metadata["redislist-decode-error"] == "" {
		t.Errorf("poison element delivered as %q, metadata %q", m.Payload, m.Metadata)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
}

func errorsIsInvalidTopic(err error) bool { return errors.Is(err, relay.ErrInvalidTopic) }

// When the connection BLMOVE waits on breaks (here killed by the server,
// as in a restart), the subscription goes on: go-redis reconnects the
// dedicated connection, and the shared layer retries the failed Receive.
func TestWaitConnectionKilled(t *testing.T) {
	ctx := context.Background()
	const topic, group = "killed", "g"
	f := newFixture(t, group, "block", "1m", "lease", "5m")
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := f.sub.Subscribe(sctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	// Find the client blocked in BLMOVE and kill it.
	deadline := time.Now().Add(30 * time.Second)
	killed := false
	for !killed {
		clients, err := f.rc.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(clients, "\n") {
			if !strings.Contains(line, "cmd=blmove") {
				continue
			}
			for _, field := range strings.Fields(line) {
				if id, ok := strings.CutPrefix(field, "id="); ok {
					n, _ := strconv.ParseInt(id, 10, 64)
					if err := f.rc.ClientKillByFilter(ctx, "ID", strconv.FormatInt(n, 10)).Err(); err != nil {
						t.Fatal(err)
					}
					killed = true
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no client blocked in BLMOVE within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := relay.NewMessage([]byte("after the kill"))
	if err := f.pub.Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	got := next(t, ch)
	if got.ID != m.ID {
		t.Fatalf("got %s, want %s", got.ID, m.ID)
	}
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
}
