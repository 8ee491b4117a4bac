package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// recPublisher records every Publish call and fails the copies whose ID
// fail says, naming them in a *relay.PublishError while the rest of the
// call goes through.
type recPublisher struct {
	mu    sync.Mutex
	calls [][]string                  // IDs per call
	sent  map[string]int              // IDs confirmed, with how often
	fail  func(id string, n int) bool // n: how often id was tried before
	tries map[string]int
}

func (p *recPublisher) Publish(_ context.Context, _ string, msgs ...*relay.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	var pe relay.PublishError
	for _, m := range msgs {
		ids = append(ids, m.ID)
		n := p.tries[m.ID]
		p.tries[m.ID]++
		if p.fail != nil && p.fail(m.ID, n) {
			pe.Failed = append(pe.Failed, relay.MessageFailure{ID: m.ID, Err: errors.New("broker busy")})
			continue
		}
		p.sent[m.ID]++
	}
	p.calls = append(p.calls, ids)
	if len(pe.Failed) > 0 {
		return &pe
	}
	return nil
}

func (p *recPublisher) Close() error { return nil }

// commitFailStore is a MemoryStore whose Commit fails (and does nothing).
type commitFailStore struct{ *middleware.MemoryStore }

func (commitFailStore) Commit(context.Context, string, string, time.Duration) error {
	return errors.New("store down")
}

// dedupForwarder builds what a session builds for a pipelined route with
// dedup on store: the forwarder, its per-message chain, and the context
// the router hands the batch handler.
func dedupForwarder(t *testing.T, shape storeShape, rc Route, store middleware.Store, pub relay.Publisher) (*route, *forwarder, context.Context) {
	t.Helper()
	rc.Name = "r"
	rc.From = Source{URL: "mem://x", Topic: "in", Group: "g"}
	rc.To = Destination{URL: "mem://y", Topic: "out"}
	rc.Dedup = &Dedup{}
	b, err := New(Config{Routes: []Route{rc}}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r := b.routes[0]
	if !r.pipelined() {
		t.Fatal("a dedup route with batch > 1 is not pipelined")
	}
	r.dedupStore = shape(store)
	mws, err := r.chain(pub)
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{r: r, pub: pub}
	f.send = f.publishOne
	f.single = router.Chain(mws[len(r.tel.middleware()):]...)(f.handle)
	return r, f, router.WithHandlerInfo(context.Background(), "r", "in")
}

func newRec(fail func(string, int) bool) *recPublisher {
	return &recPublisher{sent: map[string]int{}, tries: map[string]int{}, fail: fail}
}

// Copies of one ID inside a batch are published once, in the batch's one
// call (after one store lookup per ID), and so is nothing the store
// already marks done; every copy not published counts as a duplicate, and
// each published ID is marked done.
func TestBatchDedupWithinBatch(t *testing.T) { bothShapes(t, testBatchDedupWithinBatch) }

func testBatchDedupWithinBatch(t *testing.T, shape storeShape) {
	mem := middleware.NewMemoryStore(middleware.MemoryStoreConfig{})
	reserves := 0
	store := hookStore{mem, func(string, middleware.DedupState) { reserves++ }}
	pub := newRec(nil)
	r, f, ctx := dedupForwarder(t, shape, Route{Batch: 10}, store, pub)
	a, b, c, done := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b")), relay.NewMessage([]byte("c")), relay.NewMessage([]byte("d"))
	if err := mem.Commit(ctx, "r/"+done.ID, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	batch := []*relay.Message{a, a.Copy(), b, c, done, c.Copy(), c.Copy(), done.Copy()}
	if err := f.handleBatch(ctx, batch); err != nil {
		t.Fatalf("handleBatch = %v, want nil", err)
	}
	if len(pub.calls) != 1 || fmt.Sprint(pub.calls[0]) != fmt.Sprint([]string{a.ID, b.ID, c.ID}) {
		t.Fatalf("Publish calls %v; want one with %s %s %s", pub.calls, a.ID, b.ID, c.ID)
	}
	if got := count(r.m.duplicates); got != 5 { // a', c', c'', done, done'
		t.Errorf("duplicates = %d, want 5", got)
	}
	if got := count(r.m.forwarded); got != 3 {
		t.Errorf("forwarded = %d, want 3", got)
	}
	if reserves != 4 { // one per ID: the twins are not looked up
		t.Errorf("%d store lookups for 4 IDs, want 4", reserves)
	}
	for _, m := range []*relay.Message{a, b, c} {
		if st, _ := mem.Reserve(ctx, "r/"+m.ID, "t", time.Minute); st != middleware.Done {
			t.Errorf("%s: %v after the batch, want done", m.Payload, st)
		}
	}
}

// A copy that fails in its batch is not marked seen: it is forwarded again
// alone (the per-message chain's Dedup reserves it) and reaches the
// destination once, while the rest of the batch is marked at once. Its
// twin in the batch shares its outcome and counts as a duplicate once it
// went through.
func TestBatchDedupFailedCopyIsRetriedNotLost(t *testing.T) {
	bothShapes(t, testBatchDedupFailedCopyIsRetriedNotLost)
}

func testBatchDedupFailedCopyIsRetriedNotLost(t *testing.T, shape storeShape) {
	store := middleware.NewMemoryStore(middleware.MemoryStoreConfig{})
	a, b, c := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b")), relay.NewMessage([]byte("c"))
	pub := newRec(func(id string, n int) bool { return id == b.ID && n < 2 })
	r, f, ctx := dedupForwarder(t, shape, Route{Batch: 10, Retry: &Retry{MaxAttempts: 5, InitialInterval: time.Millisecond}}, store, pub)
	if err := f.handleBatch(ctx, []*relay.Message{a, b, b.Copy(), c}); err != nil {
		t.Fatalf("handleBatch = %v, want nil", err)
	}
	for _, m := range []*relay.Message{a, b, c} {
		if pub.sent[m.ID] != 1 {
			t.Errorf("%s confirmed %d times, want 1 (calls %v)", m.Payload, pub.sent[m.ID], pub.calls)
		}
	}
	if got := count(r.m.duplicates); got != 1 {
		t.Errorf("duplicates = %d, want 1", got)
	}
	if got, want := count(r.m.forwarded), int64(3); got != want {
		t.Errorf("forwarded = %d, want %d", got, want)
	}
	if len(pub.calls) != 3 || len(pub.calls[0]) != 3 {
		t.Errorf("Publish calls %v; want the batch of 3, then b alone twice", pub.calls)
	}
}

// A copy that still fails after the retries is nacked with its twin, is
// not counted as a duplicate and is not marked: its redelivery is
// forwarded, not dropped.
func TestBatchDedupFailedCopyStaysUnmarked(t *testing.T) {
	bothShapes(t, testBatchDedupFailedCopyStaysUnmarked)
}

func testBatchDedupFailedCopyStaysUnmarked(t *testing.T, shape storeShape) {
	store := middleware.NewMemoryStore(middleware.MemoryStoreConfig{})
	a, b := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b"))
	down := true
	pub := newRec(func(id string, _ int) bool { return id == b.ID && down })
	r, f, ctx := dedupForwarder(t, shape, Route{Batch: 10, Retry: &Retry{MaxAttempts: 2, InitialInterval: time.Millisecond}}, store, pub)
	err := f.handleBatch(ctx, []*relay.Message{a, b, b.Copy()})
	var be *router.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[b.ID] == nil {
		t.Fatalf("handleBatch = %v, want a *router.BatchError naming only %s", err, b.ID)
	}
	if got := count(r.m.duplicates); got != 0 {
		t.Errorf("duplicates = %d, want 0", got)
	}
	down = false
	if err := f.handleBatch(ctx, []*relay.Message{b}); err != nil {
		t.Fatalf("redelivery: handleBatch = %v, want nil", err)
	}
	if pub.sent[b.ID] != 1 || pub.sent[a.ID] != 1 {
		t.Errorf("confirmed a %d, b %d times; want once each", pub.sent[a.ID], pub.sent[b.ID])
	}
}

// A commit that fails does not fail the message, as in the Dedup
// middleware: the copy went out, and failing it would forward it again.
func TestBatchDedupCommitFailureAcks(t *testing.T) { bothShapes(t, testBatchDedupCommitFailureAcks) }

func testBatchDedupCommitFailureAcks(t *testing.T, shape storeShape) {
	store := commitFailStore{middleware.NewMemoryStore(middleware.MemoryStoreConfig{})}
	pub := newRec(nil)
	r, f, ctx := dedupForwarder(t, shape, Route{Batch: 10}, store, pub)
	a, b := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b"))
	if err := f.handleBatch(ctx, []*relay.Message{a, b}); err != nil {
		t.Fatalf("handleBatch = %v, want nil", err)
	}
	if len(pub.calls) != 1 || count(r.m.forwarded) != 2 {
		t.Errorf("calls %v, forwarded %d; want one call, 2 forwarded", pub.calls, count(r.m.forwarded))
	}
}

// hookStore is a MemoryStore that calls onReserve after each Reserve.
type hookStore struct {
	*middleware.MemoryStore
	onReserve func(key string, st middleware.DedupState)
}

func (s hookStore) Reserve(ctx context.Context, key, token string, lease time.Duration) (middleware.DedupState, error) {
	st, err := s.MemoryStore.Reserve(ctx, key, token, lease)
	s.onReserve(key, st)
	return st, err
}

// A message whose key another holder reserved (a copy in another lane) is
// not published in the batch: it is forwarded alone through the chain,
// whose Dedup retries it while the holder has it and acks it as a
// duplicate once the holder committed.
func TestBatchDedupInProgressGoesAlone(t *testing.T) {
	bothShapes(t, testBatchDedupInProgressGoesAlone)
}

func testBatchDedupInProgressGoesAlone(t *testing.T, shape storeShape) {
	mem := middleware.NewMemoryStore(middleware.MemoryStoreConfig{})
	a, held := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("held"))
	heldKey := "r/" + held.ID
	busy := 0
	store := hookStore{mem, func(key string, st middleware.DedupState) {
		if key == heldKey && st == middleware.InProgress {
			if busy++; busy == 2 { // the batch, then the chain's first try
				_ = mem.Commit(context.Background(), key, "other", time.Hour)
			}
		}
	}}
	pub := newRec(nil)
	r, f, ctx := dedupForwarder(t, shape, Route{Batch: 10, Retry: &Retry{MaxAttempts: 5, InitialInterval: time.Millisecond}}, store, pub)
	if st, _ := mem.Reserve(ctx, heldKey, "other", time.Minute); st != middleware.Reserved {
		t.Fatal(st)
	}
	if err := f.handleBatch(ctx, []*relay.Message{a, held}); err != nil {
		t.Fatalf("handleBatch = %v, want nil", err)
	}
	if pub.sent[held.ID] != 0 || pub.sent[a.ID] != 1 {
		t.Errorf("confirmed a %d, held %d times; want 1, 0", pub.sent[a.ID], pub.sent[held.ID])
	}
	if got := count(r.m.duplicates); got != 1 {
		t.Errorf("duplicates = %d, want 1", got)
	}
	if busy != 2 || count(r.m.retries) != 1 {
		t.Errorf("in progress %d times, %d retries; want 2 and 1", busy, count(r.m.retries))
	}
}

// On an at-most-once dedup route a copy that fails in its batch is lost
// (tried once) and not marked, its twin is not counted as a duplicate,
// and the confirmed copies are marked.
func TestBatchDedupAtMostOnce(t *testing.T) { bothShapes(t, testBatchDedupAtMostOnce) }

func testBatchDedupAtMostOnce(t *testing.T, shape storeShape) {
	store := middleware.NewMemoryStore(middleware.MemoryStoreConfig{})
	a, b := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b"))
	pub := newRec(func(id string, _ int) bool { return id == b.ID })
	r, f, ctx := dedupForwarder(t, shape, Route{Batch: 10, Guarantee: relay.AtMostOnce}, store, pub)
	if err := f.handleBatch(ctx, []*relay.Message{a, b, b.Copy(), a.Copy()}); err == nil {
		t.Fatal("handleBatch = nil, want the failed copy's error")
	}
	if pub.tries[b.ID] != 1 || pub.sent[a.ID] != 1 {
		t.Errorf("b tried %d times, a confirmed %d; want 1, 1", pub.tries[b.ID], pub.sent[a.ID])
	}
	if d, fl := count(r.m.duplicates), count(r.m.failed); d != 1 || fl != 1 {
		t.Errorf("duplicates %d, failed %d; want 1, 1", d, fl)
	}
	for m, want := range map[*relay.Message]middleware.DedupState{a: middleware.Done, b: middleware.Reserved} {
		if st, _ := store.Reserve(ctx, "r/"+m.ID, "t", time.Minute); st != want {
			t.Errorf("%s: %v after the batch, want %v", m.Payload, st, want)
		}
	}
}

// storeShape turns a test's store into the one its route uses.
type storeShape func(middleware.Store) middleware.Store

// bothShapes runs test with its store as it is (one store call per key)
// and wrapped as a middleware.BatchStore (one call per batch and step),
// so that both paths of dedupbatch.go behave the same.
func bothShapes(t *testing.T, test func(*testing.T, storeShape)) {
	t.Run("store=per-key", func(t *testing.T) { test(t, func(s middleware.Store) middleware.Store { return s }) })
	t.Run("store=batch", func(t *testing.T) {
		test(t, func(s middleware.Store) middleware.Store { return &batchStore{inner: s} })
	})
}

// batchStore is a middleware.BatchStore over a Store: a batch call makes
// the one-key calls in turn. It records every call ("ReserveBatch 3",
// "Commit", …). With failReserve, ReserveBatch reserves the first key
// and then fails, as a pipeline cut short does.
type batchStore struct {
	inner       middleware.Store
	failReserve error
	mu          sync.Mutex
	calls       []string
}

func (s *batchStore) record(call string, keys int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if keys > 0 {
		call += fmt.Sprintf(" %d", keys)
	}
	s.calls = append(s.calls, call)
}

func (s *batchStore) Reserve(ctx context.Context, key, token string, lease time.Duration) (middleware.DedupState, error) {
	s.record("Reserve", 0)
	return s.inner.Reserve(ctx, key, token, lease)
}

func (s *batchStore) Commit(ctx context.Context, key, token string, ttl time.Duration) error {
	s.record("Commit", 0)
	return s.inner.Commit(ctx, key, token, ttl)
}

func (s *batchStore) Release(ctx context.Context, key, token string) error {
	s.record("Release", 0)
	return s.inner.Release(ctx, key, token)
}

func (s *batchStore) ReserveBatch(ctx context.Context, keys []string, token string, lease time.Duration) ([]middleware.DedupState, error) {
	s.record("ReserveBatch", len(keys))
	states := make([]middleware.DedupState, len(keys))
	for i, k := range keys {
		st, err := s.inner.Reserve(ctx, k, token, lease)
		if err != nil {
			return nil, err
		}
		if s.failReserve != nil {
			return nil, s.failReserve
		}
		states[i] = st
	}
	return states, nil
}

func (s *batchStore) CommitBatch(ctx context.Context, keys []string, token string, ttl time.Duration) error {
	s.record("CommitBatch", len(keys))
	var errs []error
	for _, k := range keys {
		errs = append(errs, s.inner.Commit(ctx, k, token, ttl))
	}
	return errors.Join(errs...)
}

func (s *batchStore) ReleaseBatch(ctx context.Context, keys []string, token string) error {
	s.record("ReleaseBatch", len(keys))
	var errs []error
	for _, k := range keys {
		errs = append(errs, s.inner.Release(ctx, k, token))
	}
	return errors.Join(errs...)
}

// With a BatchStore a batch costs one store call per step, whatever its
// size: one ReserveBatch before the publish and one CommitBatch after.
// A copy that failed is released and forwarded alone, whose chain then
// reserves and commits it with the one-key calls.
func TestBatchDedupOneStoreCallPerStep(t *testing.T) {
	store := &batchStore{inner: middleware.NewMemoryStore(middleware.MemoryStoreConfig{})}
	a, b, c := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b")), relay.NewMessage([]byte("c"))
	pub := newRec(func(id string, n int) bool { return id == c.ID && n == 0 })
	_, f, ctx := dedupForwarder(t, func(s middleware.Store) middleware.Store { return s }, Route{Batch: 10, Retry: &Retry{MaxAttempts: 3, InitialInterval: time.Millisecond}}, store, pub)
	if err := f.handleBatch(ctx, []*relay.Message{a, b, a.Copy(), c}); err != nil {
		t.Fatalf("handleBatch = %v, want nil", err)
	}
	want := []string{"ReserveBatch 3", "CommitBatch 2", "Release", "Reserve", "Commit"}
	if fmt.Sprint(store.calls) != fmt.Sprint(want) {
		t.Errorf("store calls %q, want %q", store.calls, want)
	}
	for _, m := range []*relay.Message{a, b, c} {
		if pub.sent[m.ID] != 1 {
			t.Errorf("%s confirmed %d times, want 1", m.Payload, pub.sent[m.ID])
		}
	}
}

// When ReserveBatch fails partway, the keys it may have reserved are
// released, and every message is forwarded alone through the chain
// (which reserves it again): none is lost, none waits for a lease.
func TestBatchDedupReserveBatchFails(t *testing.T) {
	store := &batchStore{inner: middleware.NewMemoryStore(middleware.MemoryStoreConfig{}), failReserve: errors.New("pipeline cut short")}
	a, b, c := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b")), relay.NewMessage([]byte("c"))
	pub := newRec(nil)
	r, f, ctx := dedupForwarder(t, func(s middleware.Store) middleware.Store { return s }, Route{Batch: 10, Retry: &Retry{MaxAttempts: 2, InitialInterval: time.Millisecond}}, store, pub)
	if err := f.handleBatch(ctx, []*relay.Message{a, b, c}); err != nil {
		t.Fatalf("handleBatch = %v, want nil", err)
	}
	if len(store.calls) < 2 || store.calls[1] != "ReleaseBatch 3" {
		t.Errorf("store calls %q; want ReleaseBatch 3 right after the failed ReserveBatch", store.calls)
	}
	if len(pub.calls) != 3 || count(r.m.forwarded) != 3 || count(r.m.retries) != 0 {
		t.Errorf("Publish calls %v, forwarded %d, retries %d; want a, b, c alone, 3, 0", pub.calls, count(r.m.forwarded), count(r.m.retries))
	}
	for _, m := range []*relay.Message{a, b, c} {
		if pub.sent[m.ID] != 1 {
			t.Errorf("%s confirmed %d times, want 1", m.Payload, pub.sent[m.ID])
		}
	}
}

// A batch keeps delivery order on the dedup path: a message without an ID
// (forwarded without dedup) is published where it was delivered, not
// before the messages whose keys were reserved.
func TestBatchDedupKeepsOrder(t *testing.T) { bothShapes(t, testBatchDedupKeepsOrder) }

func testBatchDedupKeepsOrder(t *testing.T, shape storeShape) {
	store := middleware.NewMemoryStore(middleware.MemoryStoreConfig{})
	pub := newRec(nil)
	_, f, ctx := dedupForwarder(t, shape, Route{Batch: 10}, store, pub)
	first, second, third := relay.NewMessage([]byte("1")), &relay.Message{Payload: []byte("2")}, relay.NewMessage([]byte("3"))
	for _, m := range []*relay.Message{first, second, third} {
		m.Key = "K"
	}
	if err := f.handleBatch(ctx, []*relay.Message{first, second, third}); err != nil {
		t.Fatalf("handleBatch = %v, want nil", err)
	}
	if want := fmt.Sprint([][]string{{first.ID, "", third.ID}}); fmt.Sprint(pub.calls) != want {
		t.Fatalf("Publish calls %v, want %v (delivery order)", pub.calls, want)
	}
}

// A BatchStore answering fewer states than keys is treated as a failure:
// the keys are released and every message goes alone, none is lost.
func TestBatchDedupShortAnswer(t *testing.T) {
	store := &shortStore{batchStore: &batchStore{inner: middleware.NewMemoryStore(middleware.MemoryStoreConfig{})}}
	a, b := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b"))
	pub := newRec(nil)
	_, f, ctx := dedupForwarder(t, func(s middleware.Store) middleware.Store { return s }, Route{Batch: 10}, store, pub)
	if err := f.handleBatch(ctx, []*relay.Message{a, b}); err != nil {
		t.Fatalf("handleBatch = %v, want nil", err)
	}
	if pub.sent[a.ID] != 1 || pub.sent[b.ID] != 1 || len(pub.calls) != 2 {
		t.Errorf("Publish calls %v; want a and b alone, once each", pub.calls)
	}
}

// shortStore's ReserveBatch reserves every key but answers one state.
type shortStore struct{ *batchStore }

func (s *shortStore) ReserveBatch(ctx context.Context, keys []string, token string, lease time.Duration) ([]middleware.DedupState, error) {
	states, err := s.batchStore.ReserveBatch(ctx, keys, token, lease)
	return states[:1], err
}
