//go:build faults

package faults

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/sqlite"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The sqlite:// rows. Each test works on its own database file; child
// processes open the same file through their URL. There is no broker to
// restart: the "restart" row kills the process that writes, mid-write,
// and starts it again on the file.

// sqliteURL is a sqlite:// URL of a fresh file in t's temporary directory.
func sqliteURL(t *testing.T) string {
	return (&url.URL{Scheme: "sqlite", Path: filepath.Join(t.TempDir(), "relay.db")}).String()
}

// A SIGKILLed child does not release its claims: they come back when the
// lease it took runs out (lease=2s on the child's URL).
func TestKillSQLite(t *testing.T) {
	base := sqliteURL(t)
	killScenario(t, "sqlite", base,
		testenv.WithParams(base, "group", "g", "inflight", strconv.Itoa(killHold), "lease", "2s"),
		testenv.WithParams(base, "group", "g", "inflight", "64"),
		"rows claimed again after the child's lease=2s ran out")
}

// Delayed messages are rows whose visible_at is their DeliverAt; a
// SIGKILLed holder's come back after its lease.
func TestDelayedKillSQLite(t *testing.T) {
	base := sqliteURL(t)
	delayedKillScenario(t, "sqlite", base,
		testenv.WithParams(base, "group", "g", "inflight", "200", "lease", "2s"),
		"rows with visible_at = DeliverAt; the held ones claimed again after lease=2s")
}

// The backlog of a file is written and reconciled with the sqlite3 shell
// (native code): under -race the pure-Go SQLite runs about twenty times
// slower, too slow to write and drain 100k messages through relay within
// the scenario's budget. The slow consumer, whose heap is the point, is
// relay. Every message it did not ack must still be in the group's rows,
// and claimable (its release at Close done).
func TestBacklogSQLite(t *testing.T) {
	base := sqliteURL(t)
	sh := func(script string) string {
		cmd := exec.Command("sqlite3", "-bail", "-batch", "-cmd", ".timeout 10000", strings.TrimPrefix(base, "sqlite://"))
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("sqlite3: %v", err)
		}
		return string(out)
	}
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Fatalf("the sqlite3 shell is needed (apt-get install sqlite3): %v", err)
	}
	backlogWith(t, "sqlite", func(g string, inflight int) string {
		return testenv.WithParams(base, "group", g, "inflight", strconv.Itoa(inflight))
	}, "", backlogHooks{
		fill: func(l *ledger, topic string) {
			sh(fmt.Sprintf(`BEGIN IMMEDIATE;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
INSERT INTO relay_messages (topic, relay_id, payload) SELECT '%s', 'backlog-' || i, randomblob(%d) FROM n;
INSERT INTO relay_deliveries (topic, group_name, message_id) SELECT m.topic, g.name, m.id
FROM relay_messages m JOIN relay_groups g ON g.topic = m.topic WHERE m.topic = '%[2]s';
COMMIT;`, backlogTotal, topic, backlogSize))
			for i := 1; i <= backlogTotal; i++ {
				l.expectKeys("backlog-" + strconv.Itoa(i))
			}
		},
		drain: func(l *ledger, topic, group string) string {
			left := sh(fmt.Sprintf(`SELECT m.relay_id FROM relay_deliveries d JOIN relay_messages m ON m.id = d.message_id
WHERE d.topic = '%s' AND d.group_name = '%s' AND d.lease_holder IS NULL;`, topic, group))
			for _, id := range strings.Fields(left) {
				l.receive(id)
			}
			return "; backlog written and the rows left read with the sqlite3 shell (relay under -race is 20× slower on SQLite)"
		},
	})
}

// The restart row of a file: a child process publishes batches of
// crashBatch messages back to back, printing "SENDING ids" before each
// Publish and "SENT" once it returned, and is killed with SIGKILL after a
// random part of a second (a Publish is what it does nearly all the time,
// so the kill lands inside a write transaction), crashKills times, a new
// child starting on the file each time. A subscriber of this process
// consumes throughout. Then the file must pass PRAGMA integrity_check,
// every batch whose Publish returned must arrive whole, and a batch the
// kill cut must arrive whole or not at all (one transaction).
const (
	crashKills = 3
	crashBatch = 100
)

// runSQLiteWriterChild is the child of TestRestartSQLite.
func runSQLiteWriterChild() int {
	ctx := context.Background()
	pub, err := relay.OpenPublisher(ctx, os.Getenv("RELAY_FAULTS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	topic := os.Getenv("RELAY_FAULTS_TOPIC")
	w := bufio.NewWriter(os.Stdout)
	for {
		msgs := batchOf(crashBatch, 1024, "crash")
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		fmt.Fprintln(w, "SENDING", strings.Join(ids, " "))
		_ = w.Flush()
		if err := pub.Publish(ctx, topic, msgs...); err != nil {
			fmt.Fprintln(os.Stderr, "child: publish:", err)
			return 1
		}
		fmt.Fprintln(w, "SENT")
		_ = w.Flush()
	}
}

func TestRestartSQLite(t *testing.T) {
	start := time.Now()
	base := sqliteURL(t)
	topic := unique("faults-crash")
	l := newLedger()
	sub := openSub(t, testenv.WithParams(base, "group", "g", "inflight", "256"))
	provision(t, sub, topic)
	stop := consumeInto(t, l, sub, topic)

	var cut [][]string // batches in flight at a kill
	for k := range crashKills {
		cmd, out := startChild(t, "sqlite-writer", "RELAY_FAULTS_URL="+base, "RELAY_FAULTS_TOPIC="+topic)
		lines := make(chan []string)
		go func() {
			defer close(lines)
			var pending []string
			sc := bufio.NewScanner(out)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				switch f := strings.Fields(sc.Text()); {
				case len(f) > 0 && f[0] == "SENDING":
					pending = f[1:]
				case len(f) == 1 && f[0] == "SENT":
					l.expectKeys(pending...)
					pending = nil
				}
			}
			lines <- pending // what the kill cut, if anything
		}()
		time.Sleep(time.Duration(300+k*150) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if pending := <-lines; len(pending) > 0 {
			cut = append(cut, pending)
		}
	}
	l.waitAll(90 * time.Second)
	// A cut batch may have committed: its messages then arrive (all of
	// them), and are counted as sent.
	time.Sleep(time.Second)
	wholeOrNone := 0
	committed := 0
	for _, ids := range cut {
		l.mu.Lock()
		n := 0
		for _, id := range ids {
			if l.got[id] > 0 {
				n++
			}
		}
		l.mu.Unlock()
		switch n {
		case 0:
			wholeOrNone++
		case len(ids):
			wholeOrNone++
			committed++
			l.expectKeys(ids...)
		default:
			t.Errorf("a batch cut by the kill arrived in part: %d of %d messages", n, len(ids))
		}
	}
	stop()

	db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(base, "sqlite://")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var check string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Errorf("PRAGMA integrity_check after the kills: %q, %v", check, err)
	}
	record(t, l.result(t, "process restart", "sqlite",
		fmt.Sprintf("publisher SIGKILLed %d times mid-stream, restarted on the file; integrity_check %s; %d of %d batches cut by a kill arrived whole or not at all (%d committed)",
			crashKills, check, wholeOrNone, len(cut), committed)), start)
}
