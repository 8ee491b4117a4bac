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
	"github.com/go-relay/relay/internal/testkit/faultrows"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/router"
)

func init() { childMain = runChild }

// runChild runs a router whose handler, through the inbox, writes one
// effects row per message of RELAY_INBOX_TOPIC read with the subscriber URL
// RELAY_INBOX_SUB_URL, until it is killed (or gets SIGTERM). Each delivery
// the handler finished (to be acked next: a first one or a duplicate) adds
// a row with the consumer and the process's pid to the table settledTable.
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
	pid := os.Getpid()
	settled := func(next router.Handler) router.Handler {
		return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			out, err := next(ctx, m)
			if err == nil {
				_, err = pool.Exec(context.WithoutCancel(ctx), "INSERT INTO "+table(settledTable)+" (consumer, pid) VALUES ($1, $2)", consumer, pid)
			}
			return out, err
		}
	}
	if err := r.AddHandler("bill", sub, os.Getenv("RELAY_INBOX_TOPIC"), h, router.WithConcurrency(8),
		router.WithMiddleware(settled)); err != nil {
		return fail(err)
	}
	if err := r.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// settledTable counts, per process, the deliveries runChild finished.
const settledTable = "settled"

// killSource is the broker side of killScenario: where the router reads
// (pubURL for the test's publisher, subURL with the group for the router
// processes and the test's Lag probe).
type killSource struct {
	adapter        string // the row's name in docs/reliability.md
	pubURL, subURL string
	how            string // how the killed process's deliveries come back
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
	killScenario(t, topic, killSource{adapter: "redisstream → postgres inbox", pubURL: base,
		subURL: testenv.WithParams(base, "group", group, "inflight", "64", "claim_idle", "1s", "claim_every", "200ms"),
		how:    "pending entries claimed after claim_idle=1s"})
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
	killScenario(t, topic, killSource{adapter: "amqp → postgres inbox", pubURL: base,
		subURL: testenv.WithParams(base, "group", group, "inflight", "64"),
		how:    "the broker requeues the killed connection's unacked deliveries"})
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
	start := time.Now()
	ctx := context.Background()
	pool := rawPool(t)
	newInbox(t, pool)
	consumer := unique("c")
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table(settledTable)+" (consumer text NOT NULL, pid int NOT NULL)"); err != nil {
		t.Fatal(err)
	}

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
	atKill := effects()
	// What the group has not acked now is what the next processes settle.
	remaining := lag()
	t.Logf("killed with %d effects written and %d deliveries not acked (Lag)", atKill, remaining)

	// A process runs until every ID has its row, the group's Lag is 0 and
	// it has settled the deliveries left by the one before; then it stops.
	// Done when Lag is still 0 after the stop (else one more takes the
	// rest: RabbitMQ's Lag does not count a delivery held unacked by a
	// running process whose requeue the count read after the kill missed).
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
			settled := count(t, pool, "SELECT count(*) FROM "+table(settledTable)+" WHERE consumer = $1 AND pid = $2", consumer, next.Process.Pid)
			n := lag()
			state = fmt.Sprintf("round %d: %d recorded, %d of %d settled, lag %d", round, recorded, settled, remaining, n)
			return recorded == total && int64(settled) >= remaining && n == 0
		})
		if err := next.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		err := next.Wait()
		stopped = true
		if err != nil {
			t.Fatalf("process of round %d: %v", round, err)
		}
		if remaining = lag(); remaining == 0 {
			break
		}
		if round == 3 {
			t.Fatalf("%d deliveries still not acked after %d processes", remaining, round)
		}
		t.Logf("round %d stopped with %d deliveries not acked: another process takes them", round, remaining)
	}
	n := effects()
	distinct := count(t, pool, "SELECT count(DISTINCT message_id) FROM "+table("effects")+" WHERE consumer = $1", consumer)
	row := faultrows.Row{Scenario: "inbox router SIGKILL", Adapter: src.adapter, Sent: total, Received: distinct,
		Lost: total - distinct, Dups: n - distinct, Seconds: time.Since(start).Round(100 * time.Millisecond).Seconds(),
		Note: fmt.Sprintf("%d deliveries (%d IDs published twice); killed after %d effects; received/duplicates count effects rows, "+
			"not deliveries; %s", total+dups, dups, atKill, src.how)}
	t.Logf("RESULT %s/%s: sent %d received %d lost %d duplicates %d (%.1fs) %s",
		row.Scenario, row.Adapter, row.Sent, row.Received, row.Lost, row.Dups, row.Seconds, row.Note)
	if err := faultrows.Append(row); err != nil {
		t.Errorf("writing result: %v", err)
	}
	if n != total || distinct != total {
		t.Fatalf("%d effects rows for %d distinct IDs, want %d for %d (%d deliveries incl. %d duplicate IDs)", n, distinct, total, total, total+dups, dups)
	}
}
