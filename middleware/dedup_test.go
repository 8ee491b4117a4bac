package middleware_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

func TestMemoryStoreSemantics(t *testing.T) {
	clk := newFakeClock()
	s := middleware.NewMemoryStore(middleware.MemoryStoreConfig{Now: clk.Now})
	ctx := context.Background()
	expect := func(key, token string, want middleware.DedupState) {
		t.Helper()
		got, err := s.Reserve(ctx, key, token, time.Minute)
		if err != nil || got != want {
			t.Fatalf("Reserve(%s, %s) = %v, %v; want %v", key, token, got, err, want)
		}
	}
	expect("k", "t1", middleware.Reserved)
	expect("k", "t2", middleware.InProgress)
	// The holder reserving again (a retried call) renews its lease.
	clk.Advance(50 * time.Second)
	expect("k", "t1", middleware.Reserved)
	clk.Advance(50 * time.Second)
	expect("k", "t2", middleware.InProgress)
	_ = s.Release(ctx, "k", "t2") // not the holder: no effect
	expect("k", "t3", middleware.InProgress)
	_ = s.Release(ctx, "k", "t1")
	expect("k", "t4", middleware.Reserved)
	_ = s.Commit(ctx, "k", "t4", time.Hour)
	expect("k", "t5", middleware.Done)
	_ = s.Release(ctx, "k", "t4") // a committed key stays done
	expect("k", "t6", middleware.Done)
	clk.Advance(time.Hour)
	expect("k", "t7", middleware.Reserved) // TTL over
	// A reservation whose holder died expires with its lease.
	clk.Advance(time.Minute)
	expect("k", "t8", middleware.Reserved)
}

func TestMemoryStoreBounded(t *testing.T) {
	clk := newFakeClock()
	s := middleware.NewMemoryStore(middleware.MemoryStoreConfig{MaxKeys: 3, Now: clk.Now})
	ctx := context.Background()
	for i, k := range []string{"a", "b", "c", "d", "e"} {
		clk.Advance(time.Second)
		if _, err := s.Reserve(ctx, k, "t", time.Minute); err != nil {
			t.Fatal(err)
		}
		_ = s.Commit(ctx, k, "t", time.Hour+time.Duration(i)*time.Second)
	}
	if s.Len() != 3 {
		t.Fatalf("%d keys, bound 3", s.Len())
	}
	// The keys closest to expiry ("a", "b") were dropped.
	for k, want := range map[string]middleware.DedupState{"a": middleware.Reserved, "e": middleware.Done} {
		if got, _ := s.Reserve(ctx, k, "x", time.Minute); got != want {
			t.Errorf("%s: %v, want %v", k, got, want)
		}
	}
}

func TestDedupRunsOnceAndRetriesFailures(t *testing.T) {
	store := middleware.NewMemoryStore(middleware.MemoryStoreConfig{})
	obs := &recordingObserver{}
	dedup := must(middleware.Dedup(middleware.DedupConfig{Store: store}))
	var calls counter
	fail := map[string]bool{"flaky": true}
	var mu sync.Mutex
	h := dedup(func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		calls.inc(m.ID)
		mu.Lock()
		defer mu.Unlock()
		if fail[m.ID] {
			fail[m.ID] = false
			return nil, errFlaky
		}
		return []*relay.Message{relay.NewMessage(nil)}, nil
	})
	ctx := middleware.WithObserver(handlerCtx(), obs)
	msg := func(id string) *relay.Message { return &relay.Message{ID: id} }

	if outs, err := h(ctx, msg("m1")); err != nil || len(outs) != 1 {
		t.Fatalf("first: %v", err)
	}
	if outs, err := h(ctx, msg("m1")); err != nil || len(outs) != 0 {
		t.Fatalf("duplicate: outs %d, err %v", len(outs), err)
	}
	if calls.get("m1") != 1 || len(obs.dups) != 1 {
		t.Fatalf("m1 ran %d times, %d dups observed", calls.get("m1"), len(obs.dups))
	}
	// A failure releases the key: the redelivery runs (Watermill's
	// deduplicator swallowed it).
	if _, err := h(ctx, msg("flaky")); !errors.Is(err, errFlaky) {
		t.Fatalf("flaky first: %v", err)
	}
	if _, err := h(ctx, msg("flaky")); err != nil {
		t.Fatalf("flaky redelivery: %v", err)
	}
	if _, err := h(ctx, msg("flaky")); err != nil || calls.get("flaky") != 2 {
		t.Fatalf("flaky ran %d times, want 2", calls.get("flaky"))
	}
	// Another handler consuming the same message is not a duplicate.
	other := router.WithHandlerInfo(context.Background(), "other", "in")
	if _, err := h(other, msg("m1")); err != nil || calls.get("m1") != 2 {
		t.Fatalf("same ID in another handler ran %d times", calls.get("m1"))
	}
	// A panic releases too.
	hp := dedup(func(context.Context, *relay.Message) ([]*relay.Message, error) { panic("x") })
	func() {
		defer func() { _ = recover() }()
		_, _ = hp(ctx, msg("p"))
	}()
	if st, _ := store.Reserve(context.Background(), "h/p", "probe", time.Minute); st != middleware.Reserved {
		t.Fatalf("key of a panicking handler left %v", st)
	}
}

func TestDedupInProgressIsRetriedNotDropped(t *testing.T) {
	store := middleware.NewMemoryStore(middleware.MemoryStoreConfig{})
	dedup := must(middleware.Dedup(middleware.DedupConfig{Store: store}))
	inside := make(chan struct{})
	release := make(chan struct{})
	h := dedup(func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		if string(m.Payload) == "slow" {
			close(inside)
			<-release
		}
		return nil, nil
	})
	done := make(chan error)
	go func() {
		_, err := h(handlerCtx(), &relay.Message{ID: "m", Payload: []byte("slow")})
		done <- err
	}()
	<-inside
	if _, err := h(handlerCtx(), &relay.Message{ID: "m"}); !errors.Is(err, middleware.ErrInProgress) {
		t.Fatalf("concurrent duplicate: %v, want ErrInProgress", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type brokenStore struct{}

var errStore = errors.New("store down")

func (brokenStore) Reserve(context.Context, string, string, time.Duration) (middleware.DedupState, error) {
	return 0, errStore
}
func (brokenStore) Commit(context.Context, string, string, time.Duration) error { return errStore }
func (brokenStore) Release(context.Context, string, string) error               { return errStore }

func TestDedupStoreFailure(t *testing.T) {
	calls := 0
	h := func(context.Context, *relay.Message) ([]*relay.Message, error) { calls++; return nil, nil }
	closed := must(middleware.Dedup(middleware.DedupConfig{Store: brokenStore{}}))
	if _, err := closed(h)(handlerCtx(), relay.NewMessage(nil)); !errors.Is(err, errStore) || calls != 0 {
		t.Fatalf("fail-closed: err %v, calls %d", err, calls)
	}
	open := must(middleware.Dedup(middleware.DedupConfig{Store: brokenStore{}, FailOpen: true, Logger: quiet}))
	if _, err := open(h)(handlerCtx(), relay.NewMessage(nil)); err != nil || calls != 1 {
		t.Fatalf("fail-open: err %v, calls %d", err, calls)
	}
	if _, err := middleware.Dedup(middleware.DedupConfig{Lease: -1}); err == nil || !strings.Contains(err.Error(), "Store") || !strings.Contains(err.Error(), "Lease") {
		t.Fatalf("validation: %v", err)
	}
}

// Dedup in a router: a message published twice (same ID) has its effect
// once; one whose first handling fails is redelivered and handled.
func TestDedupInRouter(t *testing.T) {
	e := newEnv(t)
	sub := e.sub("g", "in")
	dedup := must(middleware.Dedup(middleware.DedupConfig{Store: middleware.NewMemoryStore(middleware.MemoryStoreConfig{})}))
	var acked counter // handlings that ended in success (acks), outside Dedup
	count := func(next router.Handler) router.Handler {
		return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			outs, err := next(ctx, m)
			if err == nil {
				acked.inc(m.ID)
			}
			return outs, err
		}
	}
	r := newRouter(t, count, dedup)
	var effects counter
	var seen counter
	var mu sync.Mutex
	failedOnce := false
	_ = r.AddHandler("charge", sub, "in", func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		seen.inc(m.ID)
		mu.Lock()
		defer mu.Unlock()
		if string(m.Payload) == "flaky" && !failedOnce {
			failedOnce = true
			return nil, errFlaky
		}
		effects.inc(m.ID)
		return nil, nil
	})
	r.Own(sub) // Run then returns only after the subscription has settled and released everything
	stop := run(t, r)
	a, b := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("flaky"))
	e.publish("in", a, a.Copy(), b, b.Copy(), a.Copy())
	// Five deliveries succeed: a, its two copies (duplicates), the flaky
	// one's copy, and the flaky one's redelivery (a duplicate by then).
	waitFor(t, "all deliveries", func() bool { return acked.total() == 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if left := e.drain("g", "in"); len(left) != 0 {
		t.Fatalf("%d messages left", len(left))
	}
	if seen.get(b.ID) != 2 {
		t.Fatalf("flaky handled %d times, want 2 (failure, then success)", seen.get(b.ID))
	}
	if effects.get(a.ID) != 1 || effects.get(b.ID) != 1 {
		t.Fatalf("effects: a %d, flaky %d; want 1 each", effects.get(a.ID), effects.get(b.ID))
	}
}

// lostAnswerStore reserves the key and then fails, as a call whose answer
// was lost does.
type lostAnswerStore struct{ *middleware.MemoryStore }

func (s lostAnswerStore) Reserve(ctx context.Context, key, token string, lease time.Duration) (middleware.DedupState, error) {
	if _, err := s.MemoryStore.Reserve(ctx, key, token, lease); err != nil {
		return 0, err
	}
	return 0, errStore
}

// A Reserve that failed after the store reserved the key does not leave
// the key held: the redelivery runs instead of waiting out the lease.
func TestDedupReserveErrorReleases(t *testing.T) {
	mem := middleware.NewMemoryStore(middleware.MemoryStoreConfig{})
	d := must(middleware.Dedup(middleware.DedupConfig{Store: lostAnswerStore{mem}}))
	h := func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil }
	m := relay.NewMessage(nil)
	if _, err := d(h)(handlerCtx(), m); !errors.Is(err, errStore) {
		t.Fatalf("Dedup = %v, want the store's error", err)
	}
	st, err := mem.Reserve(context.Background(), middleware.DefaultDedupKey(handlerCtx(), m), "next", time.Minute)
	if err != nil || st != middleware.Reserved {
		t.Fatalf("the key after the failed Reserve: %v, %v; want reserved by the next try", st, err)
	}
}
