package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// poisonScene is the checkout demo's situation on one backend: services,
// each a router handler in a group of its own on one topic, poison what
// they cannot handle into one shared poison topic. It records every
// delivery to each group, by message ID.
type poisonScene struct {
	t             *testing.T
	b             backend
	topic, poison string
	healed        atomic.Bool // from then on every service handles everything
	mu            sync.Mutex
	got           map[string]map[string]int // group -> message ID -> deliveries
	wake          chan struct{}
}

// newPoisonScene runs one service per group of groups; those in failing
// refuse a payload starting with "bad" (a permanent error, so it is
// poisoned at once) until healed. The poison topic's group "ops" is
// provisioned first.
func newPoisonScene(t *testing.T, b backend, groups, failing []string) *poisonScene {
	t.Helper()
	run := id()
	s := &poisonScene{t: t, b: b, topic: "e2e-in-orders-" + run, poison: "e2e-in-orders-" + run + "-poison",
		got: map[string]map[string]int{}, wake: make(chan struct{}, 1)}
	provision(t, b, s.poison, "ops")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, b.pubURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	poison, err := middleware.PoisonQueue(middleware.PoisonConfig{Publisher: pub, Topic: s.poison})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Config{CloseTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// record is outside PoisonQueue: a delivery counts once the poison
	// copy (if any) was published.
	record := func(next router.Handler) router.Handler {
		return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			outs, err := next(ctx, m)
			if err == nil {
				s.mu.Lock()
				g := router.Group(ctx)
				if s.got[g] == nil {
					s.got[g] = map[string]int{}
				}
				s.got[g][m.ID]++
				s.mu.Unlock()
				select {
				case s.wake <- struct{}{}:
				default:
				}
			}
			return outs, err
		}
	}
	if err := r.Use(record, poison); err != nil {
		t.Fatal(err)
	}
	fails := map[string]bool{}
	for _, g := range failing {
		fails[g] = true
	}
	for _, g := range groups {
		provision(t, b, s.topic, g)
		sub, err := relay.OpenSubscriber(ctx, b.subURL(g))
		if err != nil {
			t.Fatal(err)
		}
		r.Own(sub)
		err = r.AddHandler("svc-"+g, sub, s.topic, func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			if fails[g] && !s.healed.Load() && strings.HasPrefix(string(m.Payload), "bad") {
				return nil, relay.Permanent(errors.New("malformed order"))
			}
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("router not running after 30s")
	}
	return s
}

// waitFor waits (up to 60s) until every group of groups got id n times.
func (s *poisonScene) waitFor(id string, n int, groups ...string) {
	s.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		s.mu.Lock()
		ok := true
		for _, g := range groups {
			ok = ok && s.got[g][id] >= n
		}
		snapshot := fmt.Sprint(s.got)
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-s.wake:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			s.t.Fatalf("%s not delivered %d times to each of %v after 60s: %s", id, n, groups, snapshot)
		}
	}
}

// deliveries returns how many times group got id.
func (s *poisonScene) deliveries(group, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[group][id]
}

// settle publishes a sentinel to the topic and waits until every group of
// groups handled it, so that what was delivered before it has been seen.
func (s *poisonScene) settle(groups ...string) {
	s.t.Helper()
	m := relay.NewMessage([]byte("sentinel"))
	publish(s.t, s.b, s.topic, m)
	s.waitFor(m.ID, 1, groups...)
}

// TestReplayOncePerOriginalID: three services share a poison topic and
// each poisons the same malformed order. relay replay --dry-run shows the
// order's original ID once, with its three copies; relay replay publishes
// it once to the order topic, acks the three copies, and each service
// handles it once more, not three times. Copies of one ID that disagree
// are reported and left.
func TestReplayOncePerOriginalID(t *testing.T) {
	holdBrokers(t)
	b := redisBackend(t)
	groups := []string{"inventory", "email", "analytics"}
	s := newPoisonScene(t, b, groups, groups)
	bad := relay.NewMessage([]byte(`bad {"id": "A-1004", "items": "three"`))
	publish(t, b, s.topic, bad)
	s.waitFor(bad.ID, 1, groups...)

	code, stdout, stderr := runRelay(t, nil, "replay", b.pubURL, s.poison, "--group", "ops", "--dry-run", "--idle", "2s")
	copies := regexp.MustCompile(`^would replay ` + bad.ID + ` to ` + s.topic + `: 3 poison copies \(handler "svc-\w+", "svc-\w+", "svc-\w+"\); reason: malformed order\n$`)
	if code != 0 || !copies.MatchString(stdout) ||
		!strings.Contains(stderr, "relay replay: once per original ID: ") || !strings.Contains(stderr, "would replay 1 message(s) from 3 poison copies; 1 to "+s.topic) {
		t.Fatalf("replay --dry-run: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}
	for _, g := range groups {
		if !strings.Contains(stdout, `"svc-`+g+`"`) {
			t.Errorf("replay --dry-run does not name handler svc-%s: %s", g, stdout)
		}
	}

	s.healed.Store(true)
	code, stdout, stderr = runRelay(t, nil, "replay", b.pubURL, s.poison, "--group", "ops", "--idle", "2s")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 3 || lines[0] != "replayed "+bad.ID+" to "+s.topic ||
		!strings.HasPrefix(lines[1], "acked copy ") || !strings.HasSuffix(lines[2], ": replayed to "+s.topic+" already") ||
		!strings.Contains(stderr, "replayed 1 message(s) from 3 poison copies; 1 to "+s.topic) {
		t.Fatalf("replay: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	s.settle(groups...)
	for _, g := range groups {
		if n := s.deliveries(g, bad.ID); n != 2 { // the failed delivery, and the replayed one
			t.Errorf("group %s got %s %d times, want 2 (once poisoned, once replayed)", g, bad.ID, n)
		}
	}
	// Nothing is left to replay.
	if code, stdout, stderr := runRelay(t, nil, "replay", b.pubURL, s.poison, "--group", "ops", "--dry-run", "--idle", "1s"); code != 0 || stdout != "" ||
		!strings.Contains(stderr, "would replay 0 message(s) from 0 poison copies") {
		t.Errorf("replay --dry-run after the replay: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}

	// Two copies of one ID that disagree: the first is replayed, the
	// other reported and left on the poison topic.
	orig := relay.NewID()
	copyOf := func(handler, payload string) *relay.Message {
		m := relay.NewMessage([]byte(payload))
		m.Metadata = relay.Metadata{"relay-poison-original-id": orig, "relay-poison-topic": s.topic, "relay-poison-handler": handler}
		return m
	}
	first, other := copyOf("svc-a", "bad one"), copyOf("svc-b", "bad another")
	publish(t, b, s.poison, first, other)
	code, stdout, stderr = runRelay(t, nil, "replay", b.pubURL, s.poison, "--group", "ops", "--idle", "2s")
	warn := fmt.Sprintf(`relay replay: warning: the poison copies of %s disagree: copy %s (handler "svc-b") has another Key or payload than copy %s (handler "svc-a"), the one replayed; left on %s`,
		orig, other.ID, first.ID, s.poison)
	if code != 0 || stdout != "replayed "+orig+" to "+s.topic+"\n" || !strings.Contains(stderr, warn) ||
		!strings.Contains(stderr, "replayed 1 message(s) from 1 poison copy; 1 to "+s.topic+"; 1 left on "+s.poison) {
		t.Errorf("replay of disagreeing copies: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}
	s.settle(groups...)
	for _, g := range groups {
		if n := s.deliveries(g, orig); n != 1 {
			t.Errorf("group %s got %s %d times, want 1", g, orig, n)
		}
	}

	// Redis Streams cannot deliver to one group: --per-group is refused.
	code, _, stderr = runRelay(t, nil, "replay", b.pubURL, s.poison, "--group", "ops", "--per-group", "--idle", "1s")
	if code != 2 || !strings.Contains(stderr, "--per-group: redis (redis://127.0.0.1:6379/0) cannot deliver a message to one group of a topic") {
		t.Errorf("replay --per-group on redis: exit %d, want 2\nstderr %s", code, stderr)
	}
}

// TestReplayPerGroup: two of three services poison an order; relay replay
// --per-group sends it back to those two groups only, on RabbitMQ (the
// group's queue), PostgreSQL (a delivery row for the group) and SNS (the
// group's SQS queue): the third, which handled it, does not see it again.
func TestReplayPerGroup(t *testing.T) {
	holdBrokers(t)
	for _, b := range []backend{amqpBackend(t), postgresBackend(t), snsBackend(t)} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			groups, failing := []string{"inventory", "email", "analytics"}, []string{"inventory", "email"}
			s := newPoisonScene(t, b, groups, failing)
			bad := relay.NewMessage([]byte("bad order"))
			publish(t, b, s.topic, bad)
			s.waitFor(bad.ID, 1, groups...)

			// The poison topic's subscriber URL (with the test's short
			// polls on sns://), and --to the publishing URL.
			replay := []string{"replay", b.subURL("ops"), s.poison, "--to", b.pubURL, "--per-group", "--idle", "2s"}
			code, stdout, stderr := runRelay(t, nil, append(replay, "--dry-run")...)
			for _, g := range failing {
				if want := "would replay " + bad.ID + " to " + s.topic + " for group " + g + `: 1 poison copy (handler "svc-` + g + `"); reason: malformed order` + "\n"; !strings.Contains(stdout, want) {
					t.Errorf("replay --per-group --dry-run lacks %q", want)
				}
			}
			if code != 0 || strings.Count(stdout, "\n") != 2 || !strings.Contains(stderr, "relay replay: per group (--per-group): ") {
				t.Fatalf("replay --per-group --dry-run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}

			s.healed.Store(true)
			code, stdout, stderr = runRelay(t, nil, replay...)
			for _, g := range failing {
				if want := "replayed " + bad.ID + " to " + s.topic + " for group " + g + "\n"; !strings.Contains(stdout, want) {
					t.Errorf("replay --per-group lacks %q", want)
				}
			}
			if code != 0 || strings.Count(stdout, "\n") != 2 || !strings.Contains(stderr, "replayed 2 message(s) from 2 poison copies; 2 to "+s.topic) {
				t.Fatalf("replay --per-group: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			s.settle(groups...)
			for g, want := range map[string]int{"inventory": 2, "email": 2, "analytics": 1} {
				if n := s.deliveries(g, bad.ID); n != want {
					t.Errorf("group %s got %s %d times, want %d", g, bad.ID, n, want)
				}
			}
		})
	}
}

// TestReplaySeesPastItsWindow: copies a run holds unsettled (a dry run
// lists them all without settling any) fill the subscription's window
// (inflight=, 64 by default on Redis), after which it sees no more.
// relay replay then says how many copies the topic holds and exits 1,
// instead of listing 64 of 100 as if they were all; with a window that
// holds them it lists all 100 and exits 0.
func TestReplaySeesPastItsWindow(t *testing.T) {
	b := redisBackend(t)
	run := id()
	poison, dest := "e2e-window-poison-"+run, "e2e-window-orders-"+run
	var msgs []*relay.Message
	for i := range 100 {
		m := relay.NewMessage([]byte(strconv.Itoa(i)))
		m.Metadata = relay.Metadata{"relay-poison-original-id": relay.NewID(), "relay-poison-topic": dest}
		msgs = append(msgs, m)
	}
	provision(t, b, poison, "ops")
	publish(t, b, poison, msgs...)

	code, stdout, stderr := runRelay(t, nil, "replay", b.pubURL, poison, "--group", "ops", "--dry-run", "--idle", "1s")
	if n := strings.Count(stdout, "would replay "); code != 1 || n != 64 ||
		!strings.Contains(stderr, poison+" holds 100 copies not acked, of which this run saw 64") {
		t.Errorf("dry run with a window of 64: exit %d, %d listed\nstderr %s", code, n, stderr)
	}
	code, stdout, stderr = runRelay(t, nil, "replay", testenv.WithParams(b.pubURL, "inflight", "200"), poison,
		"--group", "ops", "--to", b.pubURL, "--dry-run", "--idle", "1s")
	if n := strings.Count(stdout, "would replay "); code != 0 || n != 100 {
		t.Errorf("dry run with a window of 200: exit %d, %d listed, want 0 and 100\nstderr %s", code, n, stderr)
	}
}
