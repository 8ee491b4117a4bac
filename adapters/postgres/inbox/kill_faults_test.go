//go:build faults

package inbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres/inbox"
	"github.com/go-relay/relay/internal/testenv"
	"github.com/go-relay/relay/router"
)

func init() { childMain = runChild }

// runChild runs a router whose handler, through the inbox, writes one
// effects row per message of RELAY_INBOX_TOPIC read with the subscriber URL
// RELAY_INBOX_SUB_URL, until it is killed (or gets SIGTERM).
func runChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	pool, err := pgxpool.New(ctx, os.Getenv("RELAY_INBOX_PG_URL"))
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	testSchema = os.Getenv("RELAY_INBOX_SCHEMA") // the parent's, for effect's table
	consumer := os.Getenv("RELAY_INBOX_CONSUMER")
	ib, err := inbox.New(pool, inbox.WithSchema(testSchema))
	if err != nil {
		return fail(err)
	}
	sub, err := relay.OpenSubscriber(ctx, os.Getenv("RELAY_INBOX_SUB_URL"))
	if err != nil {
		return fail(err)
	}
	r, err := router.New(router.Config{RedeliveryDelay: func(*relay.Message, error) time.Duration { return 10 * time.Millisecond }})
	if err != nil {
		return fail(err)
	}
	r.Own(sub)
	var calls atomic.Int32
	write := effect(consumer, &calls)
	h := ib.Handler(consumer, func(ctx context.Context, tx pgx.Tx, m *relay.Message) ([]*relay.Message, error) {
		_, err := write(ctx, tx, m)
		return nil, err // the router has no output here
	})
	if err := r.AddHandler("bill", sub, os.Getenv("RELAY_INBOX_TOPIC"), h, router.WithConcurrency(8)); err != nil {
		return fail(err)
	}
	if err := r.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// TestKillRedisSource: a router with a Redis Streams source and the inbox
// is killed with SIGKILL while it works through a backlog (with messages
// in its transactions, committed but not acked, and fetched but not
// started); a second process of the same group takes over the pending
// entries. Every message, also those published twice with the same ID,
// has exactly one effects row.
func TestKillRedisSource(t *testing.T) {
	const total, dups = 2000, 200
	ctx := context.Background()
	pool := rawPool(t)
	newInbox(t, pool)
	base := testenv.Redis(t)
	topic, group, consumer := unique("inbox-kill"), unique("g"), unique("c")
	opt, err := redis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	defer rdb.Del(context.Background(), topic)

	subURL := testenv.WithParams(base, "group", group, "inflight", "64", "claim_idle", "1s", "claim_every", "200ms")
	sub, err := relay.OpenSubscriber(ctx, subURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	_ = sub.Close()
	pub, err := relay.OpenPublisher(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var msgs []*relay.Message
	for i := range total {
		msgs = append(msgs, relay.NewMessage(fmt.Appendf(nil, "m%d", i)))
	}
	for i := 0; i < total; i += 100 {
		batch := slices.Clone(msgs[i : i+100])
		if i/100 < dups/100 { // the same IDs again, later in the stream
			for _, m := range msgs[total-dups+i : total-dups+i+100] {
				batch = append(batch, m.Copy())
			}
		}
		if err := pub.Publish(ctx, topic, batch...); err != nil {
			t.Fatal(err)
		}
	}

	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=1", "RELAY_INBOX_PG_URL="+testenv.Postgres(t),
			"RELAY_INBOX_SCHEMA="+testSchema, "RELAY_INBOX_CONSUMER="+consumer,
			"RELAY_INBOX_SUB_URL="+subURL, "RELAY_INBOX_TOPIC="+topic)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	effects := func() int {
		return count(t, pool, "SELECT count(*) FROM "+table("effects")+" WHERE consumer = $1", consumer)
	}
	first := child()
	waitFor(t, "the first process to write a fifth of the effects", func() bool { return effects() >= total/5 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	before := effects()
	pending, err := rdb.XPending(ctx, topic, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed with %d effects written and %d entries pending", before, pending.Count)

	second := child()
	defer func() { _ = second.Process.Kill(); _ = second.Wait() }()
	// Done when every ID has its row and the group has read the whole
	// stream and holds nothing pending (every delivery settled).
	var state string
	defer func() {
		if t.Failed() {
			t.Log("last state:", state)
		}
	}()
	waitFor(t, "every message handled and acked", func() bool {
		recorded := count(t, pool, "SELECT count(*) FROM "+table("inbox")+" WHERE consumer = $1", consumer)
		p, perr := rdb.XPending(ctx, topic, group).Result()
		groups, gerr := rdb.XInfoGroups(ctx, topic).Result()
		state = fmt.Sprintf("%d recorded, pending %+v (%v), groups %+v (%v)", recorded, p, perr, groups, gerr)
		return recorded == total && perr == nil && p.Count == 0 && gerr == nil && len(groups) == 1 && groups[0].Lag == 0
	})
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("second process: %v", err)
	}
	n := effects()
	distinct := count(t, pool, "SELECT count(DISTINCT message_id) FROM "+table("effects")+" WHERE consumer = $1", consumer)
	if n != total || distinct != total {
		t.Fatalf("%d effects rows for %d distinct IDs, want %d for %d (%d deliveries incl. %d duplicate IDs)", n, distinct, total, total, total+dups, dups)
	}
}
