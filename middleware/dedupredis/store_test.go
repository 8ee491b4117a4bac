package dedupredis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/middleware/dedupredis"
	"github.com/go-relay/relay/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func client(t *testing.T) *redis.Client {
	t.Helper()
	// Restarts of the shared Redis by other packages' tests (redisstream)
	// would wipe this test's keys midway: hold them off.
	testenv.HoldBroker(t, "redis")
	opt, err := redis.ParseURL(testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// store returns a Store with a unique prefix, and deletes its keys after
// the test (never anything else: Redis is shared with other tests).
func store(t *testing.T, c *redis.Client) (*dedupredis.Store, string) {
	t.Helper()
	prefix := "relay-test:dedup:" + relay.NewID() + ":"
	s, err := dedupredis.New(c, dedupredis.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return s, prefix
}

func TestStoreSemantics(t *testing.T) {
	c := client(t)
	s, prefix := store(t, c)
	ctx := context.Background()
	expect := func(key, token string, lease time.Duration, want middleware.DedupState) {
		t.Helper()
		got, err := s.Reserve(ctx, key, token, lease)
		if err != nil || got != want {
			t.Fatalf("Reserve(%s, %s) = %v, %v; want %v", key, token, got, err, want)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	expect("k", "t1", time.Minute, middleware.Reserved)
	expect("k", "t2", time.Minute, middleware.InProgress)
	// The holder reserving again (go-redis resending a call after a read
	// timeout) is Reserved, with the lease renewed.
	must(c.PExpire(ctx, prefix+"k", time.Second).Err())
	expect("k", "t1", time.Minute, middleware.Reserved)
	if ttl := c.PTTL(ctx, prefix+"k").Val(); ttl < 50*time.Second {
		t.Fatalf("lease after the holder's second Reserve: %v, want the minute again", ttl)
	}
	expect("k", "t2", time.Minute, middleware.InProgress)
	must(s.Release(ctx, "k", "t2")) // not the holder
	expect("k", "t3", time.Minute, middleware.InProgress)
	must(s.Release(ctx, "k", "t1"))
	expect("k", "t4", time.Minute, middleware.Reserved)
	must(s.Commit(ctx, "k", "t4", time.Hour))
	expect("k", "t5", time.Minute, middleware.Done)
	must(s.Release(ctx, "k", "t4")) // a committed key stays done
	expect("k", "t6", time.Minute, middleware.Done)
	// Commit extends the key's life from the lease to the TTL.
	if ttl := c.PTTL(ctx, prefix+"k").Val(); ttl < 59*time.Minute {
		t.Fatalf("TTL after commit %v", ttl)
	}
	// A reservation whose holder died expires with its lease.
	expect("dead", "t1", 20*time.Millisecond, middleware.Reserved)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := s.Reserve(ctx, "dead", "t2", time.Minute)
		must(err)
		if st == middleware.Reserved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease never expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := dedupredis.New(nil, dedupredis.Config{}); err == nil {
		t.Fatal("nil client accepted")
	}
}

// The batch calls keep the one-key calls' semantics per key, in one
// round trip, and survive a flushed script cache (NOSCRIPT).
func TestStoreBatchSemantics(t *testing.T) {
	c := client(t)
	s, prefix := store(t, c)
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	expect := func(keys []string, token string, want ...middleware.DedupState) {
		t.Helper()
		got, err := s.ReserveBatch(ctx, keys, token, time.Minute)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("ReserveBatch(%v, %s) = %v, %v; want %v", keys, token, got, err, want)
		}
	}
	if _, err := s.Reserve(ctx, "held", "t0", time.Minute); err != nil {
		t.Fatal(err)
	}
	must(s.Commit(ctx, "done", "t0", time.Hour))
	expect([]string{"fresh", "held", "done"}, "t1", middleware.Reserved, middleware.InProgress, middleware.Done)
	// The same call again (a pipeline go-redis resent) sees its own keys
	// as reserved, not as another holder's.
	expect([]string{"fresh", "held", "done"}, "t1", middleware.Reserved, middleware.InProgress, middleware.Done)
	must(s.ReleaseBatch(ctx, []string{"fresh", "held", "done"}, "t2")) // holds none of them
	expect([]string{"fresh", "held", "done"}, "t3", middleware.InProgress, middleware.InProgress, middleware.Done)
	must(s.ReleaseBatch(ctx, []string{"fresh", "held", "done"}, "t1")) // holds fresh only
	expect([]string{"fresh", "held", "done"}, "t4", middleware.Reserved, middleware.InProgress, middleware.Done)
	must(s.CommitBatch(ctx, []string{"fresh", "held"}, "t4", time.Hour))
	expect([]string{"fresh", "held", "done"}, "t5", middleware.Done, middleware.Done, middleware.Done)
	for _, k := range []string{"fresh", "held"} {
		if ttl := c.PTTL(ctx, prefix+k).Val(); ttl < 59*time.Minute {
			t.Fatalf("%s: TTL after CommitBatch %v, want the hour", k, ttl)
		}
	}
	// Redis forgets its scripts on SCRIPT FLUSH and on a restart: the
	// batch calls send them again.
	must(c.ScriptFlush(ctx).Err())
	expect([]string{"a", "b"}, "t6", middleware.Reserved, middleware.Reserved)
	must(c.ScriptFlush(ctx).Err())
	must(s.ReleaseBatch(ctx, []string{"a", "b"}, "t6"))
	expect([]string{"a", "b"}, "t7", middleware.Reserved, middleware.Reserved)
	if n := c.Exists(ctx, prefix+"a", prefix+"b").Val(); n != 2 {
		t.Fatalf("%d of the two keys exist after ReserveBatch", n)
	}
}

func TestStoreRedisDown(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	s, _ := dedupredis.New(c, dedupredis.Config{})
	if _, err := s.Reserve(context.Background(), "k", "t", time.Second); err == nil {
		t.Fatal("no error with Redis unreachable")
	}
	ctx := context.Background()
	if st, err := s.ReserveBatch(ctx, []string{"k", "l"}, "t", time.Second); err == nil || st != nil {
		t.Fatalf("ReserveBatch with Redis unreachable = %v, %v; want no states and an error", st, err)
	}
	if err := s.CommitBatch(ctx, []string{"k", "l"}, "t", time.Second); err == nil {
		t.Fatal("CommitBatch: no error with Redis unreachable")
	}
	if err := s.ReleaseBatch(ctx, []string{"k", "l"}, "t"); err == nil {
		t.Fatal("ReleaseBatch: no error with Redis unreachable")
	}
}

// Two router instances (replicas) share the Redis store and compete for the
// messages of one group. Every message is published three times with the
// same ID, and some fail on their first handling: each message's effect
// happens exactly once, and the failed ones are retried, not swallowed.
func TestTwoRoutersShareTheStore(t *testing.T) {
	const (
		n      = 60
		copies = 3
	)
	c := client(t)
	s, _ := store(t, c)
	broker := "dedup-" + relay.NewID()
	pub := memory.NewPublisher(broker, memory.PublisherConfig{})
	defer pub.Close()

	var (
		mu         sync.Mutex
		effects    = map[string]int{}
		failed     = map[string]bool{}
		succeeded  atomic.Int64
		perReplica sync.Map // name → *atomic.Int64
	)
	quiet := slog.New(slog.DiscardHandler)
	newReplica := func(name string) *router.Router {
		sub, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "charge"})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.(relay.Provisioner).Provision(context.Background(), "orders"); err != nil {
			t.Fatal(err)
		}
		dedup, err := middleware.Dedup(middleware.DedupConfig{Store: s, Lease: time.Minute, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		mine := new(atomic.Int64)
		perReplica.Store(name, mine)
		count := func(next router.Handler) router.Handler {
			return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
				outs, err := next(ctx, m)
				if err == nil {
					succeeded.Add(1)
					mine.Add(1)
				}
				return outs, err
			}
		}
		r, err := router.New(router.Config{Logger: quiet, RedeliveryDelay: func(*relay.Message, error) time.Duration { return 2 * time.Millisecond }})
		if err != nil {
			t.Fatal(err)
		}
		_ = r.Use(count, dedup)
		err = r.AddHandler("charge", sub, "orders", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
			mu.Lock()
			defer mu.Unlock()
			if string(m.Payload) == "flaky" && !failed[m.ID] {
				failed[m.ID] = true
				return nil, errors.New("payment provider timeout")
			}
			effects[m.ID]++
			return nil, nil
		}, router.WithConcurrency(4))
		if err != nil {
			t.Fatal(err)
		}
		r.Own(sub)
		return r
	}
	replicas := []*router.Router{newReplica("a"), newReplica("b")}

	var ids []string
	var batch []*relay.Message
	for i := range n {
		payload := "ok"
		if i%5 == 0 {
			payload = "flaky"
		}
		m := relay.NewMessage([]byte(payload))
		m.Key = fmt.Sprintf("customer-%d", i%7)
		ids = append(ids, m.ID)
		for range copies {
			batch = append(batch, m.Copy())
		}
	}
	// Publish before the routers start so that copies of one message are
	// delivered close together, to both replicas.
	if err := pub.Publish(context.Background(), "orders", batch...); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, len(replicas))
	for _, r := range replicas {
		go func() { errc <- r.Run(context.Background()) }()
	}
	deadline := time.Now().Add(30 * time.Second)
	for succeeded.Load() < n*copies {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries acked", succeeded.Load(), n*copies)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, r := range replicas {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	perReplica.Range(func(k, v any) bool {
		t.Logf("replica %s acked %d deliveries", k, v.(*atomic.Int64).Load())
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	flaky := 0
	for _, id := range ids {
		if effects[id] != 1 {
			t.Errorf("message %s: effect happened %d times", id, effects[id])
		}
		if failed[id] {
			flaky++
		}
	}
	if flaky != n/5 {
		t.Fatalf("%d messages failed first, want %d", flaky, n/5)
	}
	if got := succeeded.Load(); got != n*copies {
		t.Fatalf("%d deliveries acked, want exactly %d", got, n*copies)
	}
}
