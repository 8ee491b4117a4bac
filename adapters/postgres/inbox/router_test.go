package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/memory"
	_ "github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/router"
)

// TestRouterSources runs the inbox handler in a router fed by backends
// other than PostgreSQL. Message a is published twice with the same ID;
// b fails once and is redelivered by the router. Four deliveries, three
// runs of fn, one effect each.
func TestRouterSources(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string // a URL without group
	}{
		{"mem", func(t *testing.T) string { return "mem://" + unique("inbox") }},
		{"redis", func(t *testing.T) string { return testenv.Redis(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool := rawPool(t)
			ib := newInbox(t, pool)
			base, topic, consumer := tc.url(t), unique("orders"), unique("c")
			if tc.name == "redis" {
				t.Cleanup(func() { dropStream(t, base, topic) })
			}

			pub, err := relay.OpenPublisher(ctx, base)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			sub, err := relay.OpenSubscriber(ctx, testenv.WithParams(base, "group", unique("g")))
			if err != nil {
				t.Fatal(err)
			}
			if p, ok := sub.(relay.Provisioner); ok {
				if err := p.Provision(ctx, topic); err != nil {
					t.Fatal(err)
				}
			}

			var calls, delivered atomic.Int32
			write := effect(consumer, &calls)
			b := relay.NewMessage([]byte("b"))
			h := ib.Handler(consumer, func(ctx context.Context, tx pgx.Tx, m *relay.Message) ([]*relay.Message, error) {
				out, err := write(ctx, tx, m)
				if err == nil && m.ID == b.ID && m.Attempt() == 1 {
					return nil, errBoom
				}
				return out[:0], err
			})
			count := func(next router.Handler) router.Handler {
				return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
					defer delivered.Add(1)
					return next(ctx, m)
				}
			}
			r, err := router.New(router.Config{
				CloseTimeout:    10 * time.Second,
				RedeliveryDelay: func(*relay.Message, error) time.Duration { return 10 * time.Millisecond },
			})
			if err != nil {
				t.Fatal(err)
			}
			r.Own(sub)
			if err := r.AddHandler("bill", sub, topic, h, router.WithMiddleware(count)); err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(runCtx) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			<-r.Running()

			a := relay.NewMessage([]byte("a"))
			if err := pub.Publish(ctx, topic, a, a.Copy(), b); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "four deliveries", func() bool { return delivered.Load() >= 4 })
			waitFor(t, "the effects", func() bool {
				ea, _ := rows(t, pool, consumer, a.ID)
				eb, _ := rows(t, pool, consumer, b.ID)
				return ea+eb >= 2
			})
			if calls.Load() != 3 {
				t.Fatalf("fn ran %d times, want 3 (a once, b twice)", calls.Load())
			}
			for _, m := range []*relay.Message{a, b} {
				if e, r := rows(t, pool, consumer, m.ID); e != 1 || r != 1 {
					t.Fatalf("%s: %d effects rows and %d inbox rows, want 1 and 1", m.Payload, e, r)
				}
			}
			if d := delivered.Load(); d != 4 {
				t.Fatalf("%d deliveries, want 4", d)
			}
		})
	}
}

// dropStream deletes the Redis stream of topic.
func dropStream(t *testing.T, base, topic string) {
	opt, err := redis.ParseURL(base)
	if err != nil {
		t.Error(err)
		return
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.Del(context.Background(), topic).Err(); err != nil {
		t.Error(err)
	}
}
