package sqlite_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// sqlite3 runs the sqlite3 command-line shell on the file of raw with
// script on stdin and returns what it printed. Under CI a missing shell
// fails the test.
func sqlite3(t *testing.T, raw, script string) string {
	t.Helper()
	bin, err := exec.LookPath("sqlite3")
	if err != nil {
		if testenv.Required() {
			t.Fatalf("the sqlite3 shell is needed for the interop test (apt-get install sqlite3): %v", err)
		}
		t.Skipf("SKIP: no sqlite3 shell: %v", err)
	}
	cmd := exec.Command(bin, "-bail", "-batch", "-cmd", ".timeout 5000", filePath(t, raw))
	cmd.Stdin = strings.NewReader(script)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sqlite3: %v: %s", err, stderr.String())
	}
	return out.String()
}

// TestInteropCLIReads: the sqlite3 shell reads what relay wrote, as
// docs/sqlite.md describes the rows: the message with its ID, key,
// metadata (a JSON object) and payload, and one delivery row per group.
func TestInteropCLIReads(t *testing.T) {
	ctx := context.Background()
	base := dbURL(t)
	topic := relaytest.Unique("interop")
	for _, g := range []string{"billing", "email"} {
		relaytest.Provision(t, openSub(t, base, g).(relay.Provisioner), topic)
	}
	m := &relay.Message{ID: relay.NewID(), Key: "order-7", Metadata: relay.Metadata{"type": "order.placed", "trace": "a<b&c"},
		Payload: []byte{0, 1, 0xfe, 0xff}}
	if err := openPub(t, base).Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	got := sqlite3(t, base, `.mode list
SELECT relay_id, key, json_extract(metadata, '$.type'), json_extract(metadata, '$.trace'), hex(payload)
FROM relay_messages WHERE topic = '`+topic+`';
SELECT group_name, attempts, lease_holder IS NULL FROM relay_deliveries WHERE topic = '`+topic+`' ORDER BY group_name;
`)
	want := m.ID + "|order-7|order.placed|a<b&c|0001FEFF\nbilling|0|1\nemail|0|1\n"
	if got != want {
		t.Fatalf("sqlite3 read\n%s\nwant\n%s", got, want)
	}
}

// TestInteropCLIWrites: a message the sqlite3 shell inserts as
// docs/sqlite.md says (the message row and a delivery row per group, in
// one transaction) is delivered by relay with its ID, key, metadata and
// payload.
func TestInteropCLIWrites(t *testing.T) {
	base := dbURL(t, "poll", "20ms")
	topic := relaytest.Unique("interop")
	sub := openSub(t, base, "billing")
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	ch := subscribe(t, sub, topic)
	sqlite3(t, base, `BEGIN IMMEDIATE;
INSERT INTO relay_messages (topic, relay_id, key, metadata, payload)
VALUES ('`+topic+`', 'cli-1', 'order-8', json_object('type', 'order.placed'), X'00FF61');
INSERT INTO relay_deliveries (topic, group_name, message_id)
SELECT topic, name, last_insert_rowid() FROM relay_groups WHERE topic = '`+topic+`';
COMMIT;
`)
	got := relaytest.Next(t, ch, "the message the shell inserted")
	if got.ID != "cli-1" || got.Key != "order-8" || len(got.Metadata) != 1 || got.Metadata["type"] != "order.placed" ||
		!bytes.Equal(got.Payload, []byte{0, 0xff, 'a'}) || got.Attempt() != 1 {
		t.Fatalf("got ID %q key %q metadata %v payload %x attempt %d", got.ID, got.Key, got.Metadata, got.Payload, got.Attempt())
	}
	if got.Position().Offset() <= 0 {
		t.Fatalf("position %v, want the row id", got.Position())
	}
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
}
