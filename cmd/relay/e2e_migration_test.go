package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The migration runbook (docs/migration.md) played by an operator with
// the relay binary, per class of broker pair: a live producer keeps
// publishing to the source; the application's consumers read the source
// until the route reports caught-up (relay status --wait caught-up), then
// move to the destination, in a group provisioned when the bridge
// started, and skip by ID what they handled on the source (the overlap);
// relay verify then reports nothing missing.

// postgresBackend is the shared PostgreSQL in a schema of its own for the
// test, dropped at its end.
func postgresBackend(t *testing.T) backend {
	base := testenv.Postgres(t)
	schema := "relay_e2e_" + id()
	u := testenv.WithParams(base, "schema", schema)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, base)
		if err != nil {
			return
		}
		defer pool.Close()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	return backend{name: "postgres", pubURL: u, large: 1 << 20,
		subURL: func(g string) string { return testenv.WithParams(u, "group", g, "lease", "5s") }}
}

// liveProducer publishes bursts of messages to a topic until stopped and
// remembers every ID it published.
type liveProducer struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	ids  []string
	err  error
}

// startProducer publishes burst messages every pause (with a key of 16)
// to topic on b, after the messages of backlog.
func startProducer(t *testing.T, b backend, topic string, burst int, pause time.Duration) *liveProducer {
	t.Helper()
	pub, err := relay.OpenPublisher(context.Background(), b.pubURL)
	if err != nil {
		t.Fatalf("%s: %v", b.name, err)
	}
	p := &liveProducer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer pub.Close()
		for n := 0; ; n++ {
			msgs := make([]*relay.Message, burst)
			for i := range msgs {
				msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("live %d.%d", n, i)))
				msgs[i].Key = strconv.Itoa(i % 16)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := pub.Publish(ctx, topic, msgs...)
			cancel()
			if err != nil {
				p.mu.Lock()
				p.err = err
				p.mu.Unlock()
				return
			}
			p.mu.Lock()
			for _, m := range msgs {
				p.ids = append(p.ids, m.ID)
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-time.After(pause):
			}
		}
	}()
	t.Cleanup(p.halt)
	return p
}

// halt stops the producer (idempotent) and returns every ID it published.
func (p *liveProducer) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

func (p *liveProducer) published(t *testing.T) []string {
	t.Helper()
	p.halt()
	if p.err != nil {
		t.Fatalf("live producer: %v", p.err)
	}
	return p.ids
}

// backlog publishes n keyed messages to topic on b and returns their IDs.
func backlog(t *testing.T, b backend, topic string, n int) []string {
	msgs := make([]*relay.Message, n)
	ids := make([]string, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte("backlog " + strconv.Itoa(i)))
		msgs[i].Key = strconv.Itoa(i % 16)
		ids[i] = msgs[i].ID
	}
	publish(t, b, topic, msgs...)
	return ids
}

// waitCaughtUp runs relay status --wait caught-up for route on p.
func waitCaughtUp(t *testing.T, p *proc, route string) {
	t.Helper()
	code, out, errOut := runRelay(t, nil, "status", "--http", p.addr, "--wait", "caught-up", "--route", route, "--timeout", "90s")
	if code != 0 {
		t.Fatalf("relay status --wait caught-up = %d: %s%s\nbridge stderr:\n%s", code, out, errOut, tail(p.err.String(), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// migrationCase is one pair class of TestMigrationRunbook.
type migrationCase struct {
	name     string
	from, to func(*testing.T) backend
	// keep: a group on the source that nobody consumes, so that the
	// source keeps its history for relay verify (PostgreSQL deletes
	// message rows once every group acknowledged them).
	keep bool
	// noHistory: the source keeps none; relay verify takes the
	// producer's IDs with --expect.
	noHistory bool
}

// TestMigrationRunbook plays the runbook for redis -> kafka, amqp -> nats
// and postgres outbox -> kafka. Every ID is handled once on the source or
// on the destination; the destination delivers again at most the
// messages handled on the source since the bridge started (the overlap,
// which the consumers skip by ID), and relay verify finds none missing.
func TestMigrationRunbook(t *testing.T) {
	holdBrokers(t)
	cases := []migrationCase{
		{name: "redis-kafka", from: redisBackend, to: kafkaBackend},
		{name: "amqp-nats", from: amqpBackend, to: natsBackend, noHistory: true},
		{name: "postgres-kafka", from: postgresBackend, to: kafkaBackend, keep: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runbook(t, c)
		})
	}
}

func runbook(t *testing.T, c migrationCase) {
	from, to := c.from(t), c.to(t)
	topic := "e2e-in-mig-" + id()
	route := "mig-" + c.name
	// Before the bridge starts: the application's group on the source,
	// the bridge's group, a keeping group where verify needs one, and the
	// application's group on the destination (from here on it keeps
	// whatever the bridge forwards).
	provision(t, from, topic, "app")
	provision(t, from, topic, "bridge")
	if c.keep {
		provision(t, from, topic, "relay-keep")
	}
	provision(t, to, topic, "app")

	published := backlog(t, from, topic, 500)
	old := newReader(t, from, topic, "app")
	prod := startProducer(t, from, topic, 10, 20*time.Millisecond)
	cfg := routeYAML(route, from, topic, "bridge", to, topic, "    caught_up_after: 1s\n    source_positions: true\n")
	br := startBridge(t, cfg)

	// The cutover signal, then the consumers move.
	waitCaughtUp(t, br, route)
	old.stop()
	_, handledSrc := old.snapshot()
	moved := newReader(t, to, topic, "app")
	time.Sleep(500 * time.Millisecond) // the producer goes on meanwhile
	published = append(published, prod.published(t)...)
	waitCaughtUp(t, br, route)
	// The destination's group reads every copy, the ones handled on the
	// source too: wait for those that were not.
	var notHandled []string
	for _, id := range published {
		if _, ok := handledSrc[id]; !ok {
			notHandled = append(notHandled, id)
		}
	}
	if !moved.waitIDs(notHandled, 60*time.Second) {
		// Checked below, with the IDs.
		t.Logf("the destination consumer lacks some of the %d IDs not handled on the source", len(notHandled))
	}
	moved.stop()
	got, handledDst := moved.snapshot()
	// Position translation: each copy names where it was in the source
	// (none for amqp://, whose delivery tags are no lasting position).
	for _, m := range got {
		v, ok := m.Metadata[relay.SourceKey]
		if c.noHistory {
			if ok {
				t.Fatalf("copy %s has %s=%q from a source without positions", m.ID, relay.SourceKey, v)
			}
			continue
		}
		_, tp, pos, err := relay.ParseSource(v)
		if err != nil || tp != topic || pos.IsZero() {
			t.Fatalf("copy %s: %s=%q (%v): want %s:%s@POSITION", m.ID, relay.SourceKey, v, err, from.name, topic)
		}
	}

	dups, lost := 0, 0
	for _, id := range published {
		_, s := handledSrc[id]
		n := handledDst[id]
		switch {
		case s && n > 0:
			dups += n // skipped by ID: the overlap
		case !s && n == 0:
			lost++
		case !s && n > 1:
			dups += n - 1
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d published IDs were handled neither on the source nor on the destination", lost, len(published))
	}
	if dups > len(handledSrc) {
		t.Errorf("%d duplicate deliveries on the destination, more than the overlap (%d handled on the source since the bridge started)", dups, len(handledSrc))
	}
	t.Logf("%s: published %d; handled on the source %d, on the destination %d; duplicates skipped by ID %d (bound: %d)",
		c.name, len(published), len(handledSrc), len(handledDst), dups, len(handledSrc))

	args := []string{"verify", "-c", writeFile(t, "verify.yaml", cfg), "--route", route, "--http", br.addr}
	if c.noHistory {
		args = append(args, "--expect", writeFile(t, "ids.txt", strings.Join(published, "\n")+"\n"))
	}
	code, out, errOut := runRelay(t, nil, args...)
	if code != 0 || !strings.Contains(out, "missing      0\n") {
		t.Errorf("relay verify = %d:\n%s%s", code, out, errOut)
	}
	t.Logf("relay verify:\n%s", out)
	if c.keep && !strings.Contains(out, "(history read)") {
		t.Errorf("relay verify did not read the source's history:\n%s", out)
	}
	if c.noHistory {
		// An ID the destination never got: reported, exit 1.
		ghost := relay.NewID()
		args[len(args)-1] = writeFile(t, "ids2.txt", strings.Join(append(published, ghost), "\n"))
		code, out, errOut := runRelay(t, nil, args...)
		if code != 1 || !strings.Contains(out, "missing      1\n    "+ghost+"\n") || !strings.Contains(errOut, "1 missing") {
			t.Errorf("relay verify with an ID the destination lacks = %d:\n%s%s", code, out, errOut)
		}
	}
}

// consumeFirst consumes topic in group on b, acks the first n messages
// delivered and returns their IDs; the rest it received go back to the
// group when it closes (its commits cover exactly what it acked, a prefix
// of each partition).
func consumeFirst(t *testing.T, b backend, topic, group string, n int) map[string]bool {
	t.Helper()
	sub, err := relay.OpenSubscriber(context.Background(), b.subURL(group))
	if err != nil {
		t.Fatalf("%s: %v", b.name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatalf("%s: subscribe: %v", b.name, err)
	}
	acked := map[string]bool{}
	for m := range ch {
		if len(acked) < n {
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
			acked[m.ID] = true
		}
		if len(acked) == n {
			break
		}
	}
	if len(acked) < n {
		t.Fatalf("consumed %d of %d", len(acked), n)
	}
	cancel()
	if err := sub.Close(); err != nil {
		t.Fatalf("closing the consumer: %v", err)
	}
	return acked
}

// TestMigrateKafkaOffsets plays the kafka -> kafka runbook with two
// clusters: a consumer group that consumed half of a backlog on the
// source stops, a live producer goes on publishing, the route (with
// source positions) reports caught-up, relay migrate offsets translates
// the group's commits, and the group resumes on the destination: every ID
// once, none handled on both clusters.
func TestMigrateKafkaOffsets(t *testing.T) {
	src, dst := kafkaBackend(t), kafkaBackend(t)
	topic := "e2e-in-kk-" + id()
	route := "mig-kafka-kafka"
	provision(t, src, topic, "app")
	provision(t, src, topic, "bridge")
	published := backlog(t, src, topic, 2000)
	handledSrc := consumeFirst(t, src, topic, "app", 1000)
	prod := startProducer(t, src, topic, 10, 20*time.Millisecond)
	// One lane (concurrency <= batch) keeps each source partition's order
	// on the destination, which makes the translation exact.
	cfg := routeYAML(route, src, topic, "bridge", dst, topic,
		"    caught_up_after: 1s\n    source_positions: true\n    concurrency: 100\n    batch: 100\n")
	br := startBridge(t, cfg)
	waitCaughtUp(t, br, route)

	srcURL, dstURL := strings.SplitN(src.pubURL, "?", 2)[0], strings.SplitN(dst.pubURL, "?", 2)[0]
	code, out, errOut := runRelay(t, nil, "migrate", "offsets", "--from", srcURL, "--to", dstURL, "--group", "app")
	if code != 0 {
		t.Fatalf("relay migrate offsets = %d: %s%s", code, out, errOut)
	}
	t.Logf("relay migrate offsets:\n%s", out)
	// Translated once, the group is refused a second time: it has
	// committed offsets on the destination now.
	if code, _, errOut := runRelay(t, nil, "migrate", "offsets", "--from", srcURL, "--to", dstURL, "--group", "app"); code != 1 || !strings.Contains(errOut, "already has committed offsets") {
		t.Errorf("a second translation = %d: %s", code, errOut)
	}

	moved := newReader(t, dst, topic, "app")
	time.Sleep(300 * time.Millisecond)
	published = append(published, prod.published(t)...)
	waitCaughtUp(t, br, route)
	want := len(published) - len(handledSrc)
	moved.waitUnique(want, 60*time.Second)
	moved.stop()
	_, handledDst := moved.snapshot()
	gaps, twice := 0, 0
	for _, id := range published {
		n := handledDst[id]
		switch {
		case handledSrc[id] && n > 0, n > 1:
			twice++
		case !handledSrc[id] && n == 0:
			gaps++
		}
	}
	t.Logf("published %d; handled on the source %d, on the destination %d distinct; missed %d, handled twice %d",
		len(published), len(handledSrc), len(handledDst), gaps, twice)
	if gaps > 0 || twice > 0 || len(handledDst) != want {
		t.Errorf("after the translation: %d IDs missed, %d handled twice, %d on the destination (want %d)", gaps, twice, len(handledDst), want)
	}
	code, out, errOut = runRelay(t, nil, "verify", "-c", writeFile(t, "verify.yaml", cfg), "--route", route)
	if code != 0 || !strings.Contains(out, "missing      0\n") {
		t.Errorf("relay verify = %d:\n%s%s", code, out, errOut)
	}
}

// Copies without source positions (a route without source_positions:
// true) cannot be translated: relay migrate offsets exits 1 saying so and
// commits nothing, instead of moving the group to the end of every
// partition (every record without a position looked consumed).
func TestMigrateOffsetsNeedsSourcePositions(t *testing.T) {
	src, dst := kafkaBackend(t), kafkaBackend(t)
	topic := "e2e-in-nopos-" + id()
	provision(t, src, topic, "app")
	backlog(t, src, topic, 20)
	consumeFirst(t, src, topic, "app", 10)
	provision(t, dst, topic, "reader")
	backlog(t, dst, topic, 20) // copies as a route without source_positions writes them

	srcURL, dstURL := strings.SplitN(src.pubURL, "?", 2)[0], strings.SplitN(dst.pubURL, "?", 2)[0]
	code, out, errOut := runRelay(t, nil, "migrate", "offsets", "--from", srcURL, "--to", dstURL, "--group", "app")
	if code != 1 || !strings.Contains(errOut, "source_positions: true") {
		t.Fatalf("relay migrate offsets on copies without positions = %d: %s%s; want 1, naming source_positions", code, out, errOut)
	}
	if code, _, errOut := runRelay(t, nil, "migrate", "offsets", "--from", srcURL, "--to", dstURL, "--group", "app", "--dry-run"); code != 1 {
		t.Errorf("--dry-run = %d, want 1: %s", code, errOut)
	}
}
