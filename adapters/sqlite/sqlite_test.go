package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/sqlite"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestURLForms: absolute and relative paths name the file they say, the
// file is created, and what cannot be a file is refused with a reason.
func TestURLForms(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("data", 0o755); err != nil {
		t.Fatal(err)
	}
	for raw, want := range map[string]string{
		"sqlite://" + filepath.Join(dir, "abs.db"):  filepath.Join(dir, "abs.db"),
		"sqlite://./rel.db":                         filepath.Join(dir, "rel.db"),
		"sqlite://data/sub.db":                      filepath.Join(dir, "data", "sub.db"),
		"sqlite://./my%20dir.db?synchronous=normal": filepath.Join(dir, "my dir.db"),
	} {
		p, err := relay.OpenPublisher(context.Background(), raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		_ = p.Close()
		if _, err := os.Stat(want); err != nil {
			t.Errorf("%s did not create %s: %v", raw, want, err)
		}
	}
	for raw, want := range map[string]string{
		"sqlite://":                         "no database file",
		"sqlite://./x.db?synchronous=off":   `"off" is not one of full, normal`,
		"sqlite://./x.db?lease=10ms":        "lease",
		"sqlite://./x.db?nope=1":            `"nope": unknown parameter`,
		"sqlite:x.db":                       "sqlite:///absolute/path.db",
		"sqlite://./missing/dir/x.db":       "does its directory exist",
		"sqlite://:memory:":                 "use mem://",
		"sqlite://./x.db?max_bytes=600MiB":  "512 MiB",
		"sqlite://./x.db?busy_timeout=soon": "busy_timeout",
	} {
		p, err := relay.OpenPublisher(context.Background(), raw)
		if err == nil {
			_ = p.Close()
			t.Errorf("%s opened", raw)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to say %q", raw, err, want)
		}
	}
	if _, err := relay.OpenSubscriber(context.Background(), "sqlite://./x.db"); err == nil || !strings.Contains(err.Error(), "group") {
		t.Errorf("subscriber without group: %v", err)
	}
	// One file, one handle per process: its settings must agree.
	p := openPub(t, "sqlite://./rel.db")
	_ = p
	if _, err := relay.OpenSubscriber(context.Background(), "sqlite://./rel.db?group=g&busy_timeout=1s"); err == nil || !strings.Contains(err.Error(), "same settings") {
		t.Errorf("second handle with other settings: %v", err)
	}
}

// TestMemoryRefused: Path ":memory:" is refused with the reason, as
// sqlite://:memory: is (TestURLForms).
func TestMemoryRefused(t *testing.T) {
	_, err := sqlite.NewPublisher(context.Background(), sqlite.PublisherConfig{File: sqlite.File{Path: ":memory:"}})
	if err == nil || !strings.Contains(err.Error(), "mem://") {
		t.Fatalf("Path :memory: = %v, want a refusal pointing at mem://", err)
	}
}

// TestRetention: a message row stays until every group acked it, and
// nothing of it is left after; a topic without groups keeps nothing.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	base := dbURL(t)
	db := rawDB(t, base)
	topic := relaytest.Unique("ret")
	a, b := openSub(t, base, "a"), openSub(t, base, "b")
	for _, s := range []relay.Subscriber{a, b} {
		relaytest.Provision(t, s.(relay.Provisioner), topic)
	}
	pub := openPub(t, base)
	if err := pub.Publish(ctx, "no-groups", relay.NewMessage([]byte("dropped"))); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, topic, relay.NewMessage([]byte("1")), relay.NewMessage([]byte("2"))); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM relay_messages"); n != 2 {
		t.Fatalf("%d message rows, want 2 (none for the topic without groups)", n)
	}
	ackAll := func(s relay.Subscriber) {
		ch, _ := relaytest.Subscribe(t, s, topic)
		for range 2 {
			if err := relaytest.Next(t, ch, "a message").Ack(); err != nil {
				t.Fatal(err)
			}
		}
		// Acks go with the next claim or the release at the end.
		_ = s.Close()
	}
	ackAll(a)
	if n := count(t, db, "SELECT count(*) FROM relay_messages"); n != 2 {
		t.Fatalf("%d message rows after group a acked, want 2 (b still needs them)", n)
	}
	ackAll(b)
	if n := count(t, db, "SELECT (SELECT count(*) FROM relay_messages) + (SELECT count(*) FROM relay_deliveries)"); n != 0 {
		t.Fatalf("%d rows left after both groups acked", n)
	}
}

// TestMaxAge: max_age deletes old messages, acked or not, with their
// delivery rows; younger ones are delivered.
func TestMaxAge(t *testing.T) {
	ctx := context.Background()
	base := dbURL(t)
	db := rawDB(t, base)
	topic := relaytest.Unique("age")
	sub := openSub(t, base, "g", "max_age", "1h")
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	old, young := relay.NewMessage([]byte("old")), relay.NewMessage([]byte("young"))
	if err := openPub(t, base).Publish(ctx, topic, old, young); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE relay_messages SET created_at = created_at - 7200000000 WHERE relay_id = ?", old.ID); err != nil {
		t.Fatal(err)
	}
	got := relaytest.Next(t, subscribe(t, sub, topic), "a message")
	if got.ID != young.ID {
		t.Fatalf("got %s (%q), want only the young message", got.ID, got.Payload)
	}
	if n := count(t, db, "SELECT count(*) FROM relay_deliveries WHERE message_id = (SELECT id FROM relay_messages WHERE relay_id = ?)", old.ID); n != 0 {
		t.Fatalf("%d delivery rows of the old message", n)
	}
	if n := count(t, db, "SELECT count(*) FROM relay_messages WHERE relay_id = ?", old.ID); n != 0 {
		t.Fatal("the old message is still there")
	}
	_ = got.Ack()
}

// TestExpiredLeaseTakenOver: a row claimed by a consumer that died (its
// lease ran out) is claimed by a live subscription, with the attempt the
// database counted.
func TestExpiredLeaseTakenOver(t *testing.T) {
	ctx := context.Background()
	base := dbURL(t)
	topic := relaytest.Unique("lease")
	sub := openSub(t, base, "g")
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	m := relay.NewMessage([]byte("claimed by the dead"))
	if err := openPub(t, base).Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, base).Exec("UPDATE relay_deliveries SET attempts = attempts + 1, lease_holder = 'dead', visible_at = ? WHERE topic = ?",
		time.Now().Add(-time.Second).UnixMicro(), topic); err != nil {
		t.Fatal(err)
	}
	got := relaytest.Next(t, subscribe(t, sub, topic), "a message")
	if got.ID != m.ID || got.Attempt() != 2 {
		t.Fatalf("got %q attempt %d, want %q attempt 2", got.ID, got.Attempt(), m.ID)
	}
	_ = got.Ack()
}

// TestLeaseExtended: see relaytest.LeaseExtended.
func TestLeaseExtended(t *testing.T) {
	const lease = 600 * time.Millisecond
	base := dbURL(t)
	relaytest.LeaseExtended(t, openPub(t, base), openSub(t, base, "g", "lease", lease.String()),
		openSub(t, base, "g", "lease", lease.String(), "poll", "50ms"), relaytest.Unique("extend"), lease)
}

// TestOutbox: see relaytest.Outbox; and PublishTx checks as Publish does,
// and explains missing tables.
func TestOutbox(t *testing.T) {
	ctx := context.Background()
	base := dbURL(t, "poll", "20ms")
	db := rawDB(t, base)
	topic := relaytest.Unique("outbox")
	sub := openSub(t, base, "g")
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	if _, err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	relaytest.Outbox(t, sub, topic, relaytest.OutboxCase{
		Write: func(t *testing.T, topic string, m *relay.Message, commit bool) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback() //nolint:errcheck // after Commit: a no-op
			if _, err := tx.Exec("INSERT INTO orders (id) VALUES (?)", m.Key); err != nil {
				t.Fatal(err)
			}
			if err := sqlite.PublishTx(ctx, tx, topic, m); err != nil {
				t.Fatal(err)
			}
			if commit {
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
		},
		MessageRows: func(t *testing.T, id string) int {
			return count(t, db, "SELECT count(*) FROM relay_messages WHERE relay_id = ?", id)
		},
		BusinessRows: func(t *testing.T, key string) int {
			return count(t, db, "SELECT count(*) FROM orders WHERE id = ?", key)
		},
	})

	err := sqlite.PublishTx(ctx, nil, topic, &relay.Message{Key: "a\x00"})
	var le *relay.LimitError
	if !errors.As(err, &le) || le.What != "key" {
		t.Fatalf("key with NUL: %v, want a *relay.LimitError about the key", err)
	}
	tx, err := rawDB(t, dbURL(t)).Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // nothing to keep
	if err := sqlite.PublishTx(ctx, tx, topic, relay.NewMessage(nil)); err == nil || !strings.Contains(err.Error(), "SchemaSQL") {
		t.Fatalf("without relay's tables: %v, want an error pointing at SchemaSQL", err)
	}
}

// TestDecodeMetadata: rows written by other clients are delivered whatever
// their metadata column holds.
func TestDecodeMetadata(t *testing.T) {
	for col, want := range map[string]relay.Metadata{
		"":                         nil,
		"{}":                       nil,
		"null":                     nil,
		`{"a":"1","b":2,"c":null}`: {"a": "1", "b": "2", "c": "null"},
		`{"x":{"y":[1]}}`:          {"x": `{"y":[1]}`},
		"not json":                 {sqlite.RawMetadataKey: "not json"},
		`["a"]`:                    {sqlite.RawMetadataKey: `["a"]`},
		`{"k":"\u00e9\n<&>"}`:      {"k": "é\n<&>"},
	} {
		got := sqlite.DecodeMetadata(col)
		if len(got) != len(want) {
			t.Errorf("%q: %v, want %v", col, got, want)
			continue
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%q: %v, want %v", col, got, want)
			}
		}
	}
}

// TestGroups: CheckGroups tells a topic without a group, PublishToGroup
// delivers to the one group named and to no other, and refuses a group
// that does not exist, storing nothing.
func TestGroups(t *testing.T) {
	ctx := context.Background()
	base := dbURL(t)
	db := rawDB(t, base)
	topic := relaytest.Unique("groups")
	pub := openPub(t, base)
	var ng *relay.NoGroupError
	if err := pub.(relay.GroupChecker).CheckGroups(ctx, topic); !errors.As(err, &ng) || ng.Topic != topic {
		t.Fatalf("CheckGroups without a group: %v, want a *relay.NoGroupError", err)
	}
	a, b := openSub(t, base, "a"), openSub(t, base, "b")
	relaytest.Provision(t, a.(relay.Provisioner), topic)
	relaytest.Provision(t, b.(relay.Provisioner), topic)
	if err := pub.(relay.GroupChecker).CheckGroups(ctx, topic); err != nil {
		t.Fatalf("CheckGroups with two groups: %v", err)
	}
	gp := pub.(relay.GroupPublisher)
	if err := gp.PublishToGroup(ctx, topic, "nope", relay.NewMessage([]byte("x"))); !errors.As(err, &ng) || ng.Group != "nope" {
		t.Fatalf("PublishToGroup to a missing group: %v, want a *relay.NoGroupError", err)
	}
	m := relay.NewMessage([]byte("for b only"))
	if err := gp.PublishToGroup(ctx, topic, "b", m); err != nil {
		t.Fatal(err)
	}
	got := relaytest.Next(t, subscribe(t, b, topic), "the message for b")
	if got.ID != m.ID {
		t.Fatalf("group b got %s, want %s", got.ID, m.ID)
	}
	// Counted while b holds its message: its ack deletes the rows.
	if n := count(t, db, "SELECT count(*) FROM relay_deliveries WHERE group_name = 'a'"); n != 0 {
		t.Fatalf("group a has %d delivery rows, want none", n)
	}
	if n := count(t, db, "SELECT count(*) FROM relay_messages"); n != 1 {
		t.Fatalf("%d message rows, want the one for b (the refused one stored nothing)", n)
	}
	_ = got.Ack()
}
