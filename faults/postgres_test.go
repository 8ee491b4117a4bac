//go:build faults

package faults

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The postgres:// rows. Each test works in its own schema
// (relay_faults_<random>), dropped when the test ends; child processes get
// the same schema through their URL.

// pgSchema creates nothing: it names a fresh schema for t, which the
// adapter creates on open, and drops it (with relay's tables and the
// scenario's own) when t ends.
func pgSchema(t *testing.T) string {
	t.Helper()
	schema := "relay_faults_" + strings.ToLower(strings.ReplaceAll(relay.NewID(), "-", "")[20:])
	plain := testenv.Postgres(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, plain)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return schema
}

// pgURL is the test server with a fresh schema (see pgSchema).
func pgURL(t *testing.T) string {
	t.Helper()
	return testenv.WithParams(testenv.Postgres(t), "schema", pgSchema(t))
}

// pgUp tells whether the test server accepts queries.
func pgUp() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testenv.URL("RELAY_TEST_POSTGRES_URL", testenv.DefaultPostgresURL))
	if err != nil {
		return false
	}
	defer c.Close(ctx)
	return c.Ping(ctx) == nil
}

// A SIGKILLed child does not release its claims: they come back when the
// lease it took runs out (lease=2s on the child's URL).
func TestKillPostgres(t *testing.T) {
	base := pgURL(t)
	group := unique("g")
	killScenario(t, "postgres", base,
		testenv.WithParams(base, "group", group, "inflight", strconv.Itoa(killHold), "lease", "2s"),
		testenv.WithParams(base, "group", group, "inflight", "64", "poll", "250ms"),
		"rows claimed again after the child's lease=2s ran out")
}

// PostgreSQL is stopped (fast shutdown: every session ended) and started
// with testenv.LocalPostgres, under its restart lock; its data is on disk,
// so committed messages survive. The cleanup starts it again if the test
// failed while it was down.
func TestRestartPostgres(t *testing.T) {
	base := pgURL(t)
	local := testenv.LocalPostgres(pgUp)
	if why := local.CanRestart(t); why != "" {
		t.Skip("SKIP: cannot restart PostgreSQL: " + why)
	}
	restartScenario(t, "postgres", base, testenv.WithParams(base, "group", unique("g"), "inflight", "64"), func(t *testing.T) {
		local.Restart(t)
		if !pgUp() {
			t.Fatal("PostgreSQL does not accept queries after the restart")
		}
	})
}

func TestBacklogPostgres(t *testing.T) {
	base := pgURL(t)
	backlogScenario(t, "postgres", base, func(g string, inflight int) string {
		return testenv.WithParams(base, "group", g, "inflight", strconv.Itoa(inflight))
	}, "")
}

// The outbox scenario: a child process writes outboxCommitted transactions,
// each a business row plus outboxPerTx messages through Outbox.PublishTx,
// commits them one by one, then opens one more the same way and is
// SIGKILLed before committing it. A subscriber consumes throughout. Every
// message of a committed transaction must arrive; none of the killed
// transaction's may, and neither its business row nor its message rows
// may exist once the server has ended the child's session.
const (
	outboxCommitted = 20
	outboxPerTx     = 10
)

// runOutboxChild is the child of TestOutboxKillPostgres: it connects to
// RELAY_FAULTS_URL (plain, no relay parameters), prints "COMMITTED ids"
// after each committed transaction and "OPEN order ids" once the last
// transaction holds its rows uncommitted, then waits to be killed.
func runOutboxChild() int {
	ctx := context.Background()
	schema, topic := os.Getenv("RELAY_FAULTS_SCHEMA"), os.Getenv("RELAY_FAULTS_TOPIC")
	c, err := pgx.Connect(ctx, os.Getenv("RELAY_FAULTS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	ob := postgres.Outbox{Schema: schema}
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	write := func(order string) (pgx.Tx, []string, error) {
		tx, err := c.Begin(ctx)
		if err != nil {
			return nil, nil, err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id) VALUES ($1)", order); err != nil {
			return nil, nil, err
		}
		msgs := batchOf(outboxPerTx, 64, order)
		if err := ob.PublishTx(ctx, tx, topic, msgs...); err != nil {
			return nil, nil, err
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		return tx, ids, nil
	}
	for i := range outboxCommitted {
		tx, ids, err := write("order-" + strconv.Itoa(i))
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		fmt.Printf("COMMITTED %s\n", strings.Join(ids, " "))
	}
	_, ids, err := write("order-killed")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	fmt.Printf("OPEN order-killed %s\n", strings.Join(ids, " "))
	select {} // killed here, the transaction open
}

func TestOutboxKillPostgres(t *testing.T) {
	start := time.Now()
	schema := pgSchema(t)
	plain := testenv.Postgres(t)
	base := testenv.WithParams(plain, "schema", schema)
	topic := unique("faults-outbox")
	l := newLedger()
	sub := openSub(t, testenv.WithParams(base, "group", unique("g"), "inflight", "64", "poll", "250ms"))
	provision(t, sub, topic) // creates relay's tables and the group
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := pgx.Connect(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "orders"}.Sanitize()+" (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	consume(l, ch, &wg)

	app := unique("relay-faults-outbox")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=outbox", "RELAY_FAULTS_URL="+testenv.WithParams(plain, "application_name", app),
		"RELAY_FAULTS_SCHEMA="+schema, "RELAY_FAULTS_TOPIC="+topic)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	open := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) > 1 && f[0] == "COMMITTED":
				l.expectKeys(f[1:]...)
			case len(f) > 2 && f[0] == "OPEN":
				open <- f[1:]
			}
		}
		close(open)
	}()
	var pending []string
	select {
	case f, ok := <-open:
		if !ok {
			t.Fatal("child exited before opening its last transaction")
		}
		pending = f
	case <-time.After(60 * time.Second):
		t.Fatal("child did not open its last transaction within 60s")
	}
	order, pendingIDs := pending[0], pending[1:]
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true

	// The server rolls the transaction back when it notices the session
	// is gone; wait for that, then for the group to have nothing left.
	waitCond(t, "the killed child's session to end", func() (bool, error) {
		var n int
		err := db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n)
		return n == 0, err
	})
	l.waitAll(60 * time.Second)
	waitCond(t, "the group's deliveries to be acked", func() (bool, error) {
		var n int
		err := db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "deliveries"}.Sanitize()+" WHERE topic = $1", topic).Scan(&n)
		return n == 0, err
	})
	var rows, orders int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "messages"}.Sanitize()+" WHERE relay_id = ANY($1)", pendingIDs).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "orders"}.Sanitize()+" WHERE id = $1", order).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || orders != 0 {
		t.Errorf("the killed transaction left %d message rows and %d business rows", rows, orders)
	}
	var committed int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "orders"}.Sanitize()).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	if committed != outboxCommitted {
		t.Errorf("%d business rows of committed transactions, want %d", committed, outboxCommitted)
	}
	cancel()
	_ = sub.Close()
	wg.Wait()
	delivered := 0
	l.mu.Lock()
	for _, id := range pendingIDs {
		if l.got[id] > 0 {
			delivered++
		}
	}
	l.mu.Unlock()
	if delivered > 0 {
		t.Errorf("%d of the killed transaction's %d messages were delivered", delivered, len(pendingIDs))
	}
	record(t, l.result(t, "outbox writer SIGKILL mid-transaction", "postgres",
		fmt.Sprintf("%d transactions committed (%d messages each, with a business row); the open one killed: %d of its %d messages delivered, %d rows left",
			outboxCommitted, outboxPerTx, delivered, len(pendingIDs), rows+orders)), start)
}

// waitCond polls cond until it reports true, failing t after 60s or on an
// error.
func waitCond(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after 60s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
