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
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
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

// killSource is the broker side of killScenario: where the router reads
// (pubURL for the test's publisher, subURL with the group for the router
// processes and the test's Lag probe).
type killSource struct {
	pubURL, subURL string
}

// TestKillRedisSource: killScenario with a Redis Streams source; a killed
// process's pending entries are claimed by the next one after claim_idle.
func TestKillRedisSource(t *testing.T) {
	base := testenv.Redis(t)
	topic, group := unique("inbox-kill"), unique("g")
	opt, err := redis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	defer rdb.Del(context.Background(), topic)
	killScenario(t, topic, killSource{pubURL: base,
		subURL: testenv.WithParams(base, "group", group, "inflight", "64", "claim_idle", "1s", "claim_every", "200ms")})
}

// TestKillRabbitMQSource: killScenario with a RabbitMQ source; the broker
// requeues what the killed process held unacked when its connection drops.
// The topic's exchange and the group's queue are deleted at the end.
func TestKillRabbitMQSource(t *testing.T) {
	base := testenv.AMQP(t)
	topic, group := unique("inbox-kill"), unique("g")
	defer func() {
		conn, err := amqp091.Dial(base)
		if err != nil {
			t.Errorf("deleting the test's queue and exchange: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("deleting the test's queue and exchange: %v", err)
			return
		}
		if _, err := ch.QueueDelete(topic+"."+group, false, false, false); err != nil {
			t.Errorf("deleting queue: %v", err)
		}
		if err := ch.ExchangeDelete(topic, false, false); err != nil {
			t.Errorf("deleting exchange: %v", err)
		}
	}()
	killScenario(t, topic, killSource{pubURL: base,
		subURL: testenv.WithParams(base, "group", group, "inflight", "64")})
}

// killScenario: a router with src as its source and the inbox is killed
// with SIGKILL while it works through a backlog of topic (with messages in
// its transactions, committed but not acked, and fetched but not started);
// a second process of the same group takes over what the first held.
// Every message, also those published twice with the same ID, must have
// exactly one effects row, and the group must have settled every delivery:
// its Lag is 0 once the last process stopped (SIGTERM). Lag counts what a
// running consumer holds unacked on some backends (Redis) but not on
// others (RabbitMQ, where it returns to the queue when the process
// closes), so a process that stopped with deliveries left (Lag > 0) is
// followed by another, up to a few rounds.
func killScenario(t *testing.T, topic string, src killSource) {
	const total, dups = 2000, 200
	ctx := context.Background()
	pool := rawPool(t)
	newInbox(t, pool)
	consumer := unique("c")

	sub, err := relay.OpenSubscriber(ctx, src.subURL)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	lag := func() int64 {
		n, err := sub.(relay.LagReporter).Lag(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	pub, err := relay.OpenPublisher(ctx, src.pubURL)
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
			"RELAY_INBOX_SUB_URL="+src.subURL, "RELAY_INBOX_TOPIC="+topic)
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
	t.Logf("killed with %d effects written and %d deliveries not acked (Lag)", effects(), lag())

	// Each round runs a process until every ID has its row and Lag is 0,
	// then stops it; done when Lag is still 0 after the stop.
	var state string
	defer func() {
		if t.Failed() {
			t.Log("last state:", state)
		}
	}()
	for round := 1; ; round++ {
		next := child()
		stopped := false
		defer func() {
			if !stopped {
				_ = next.Process.Kill()
				_ = next.Wait()
			}
		}()
		waitFor(t, "every message handled and acked", func() bool {
			recorded := count(t, pool, "SELECT count(*) FROM "+table("inbox")+" WHERE consumer = $1", consumer)
			n := lag()
			state = fmt.Sprintf("round %d: %d recorded, lag %d", round, recorded, n)
			return recorded == total && n == 0
		})
		if err := next.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		err := next.Wait()
		stopped = true
		if err != nil {
			t.Fatalf("process of round %d: %v", round, err)
		}
		left := lag()
		if left == 0 {
			break
		}
		if round == 3 {
			t.Fatalf("%d deliveries still not acked after %d processes", left, round)
		}
		t.Logf("round %d stopped with %d deliveries not acked: another process takes them", round, left)
	}
	n := effects()
	distinct := count(t, pool, "SELECT count(DISTINCT message_id) FROM "+table("effects")+" WHERE consumer = $1", consumer)
	if n != total || distinct != total {
		t.Fatalf("%d effects rows for %d distinct IDs, want %d for %d (%d deliveries incl. %d duplicate IDs)", n, distinct, total, total, total+dups, dups)
	}
}
