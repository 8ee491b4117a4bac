package router_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/router"
)

// logBuf collects a router's log for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// bufSub is a fakeSub whose subscription channel holds msgs from the
// start, so a batch handler with no wait sees them all as already there.
type bufSub struct {
	*fakeSub
	msgs []*relay.Message
}

func (b *bufSub) Subscribe(ctx context.Context, topic string) (<-chan *relay.Message, error) {
	out := make(chan *relay.Message, len(b.msgs))
	for _, m := range b.msgs {
		out <- m
	}
	go func() {
		<-ctx.Done()
		close(out)
	}()
	return out, nil
}

// publishN provisions topic "in" for sub's group and publishes n messages.
func publishN(t *testing.T, pub relay.Publisher, sub relay.Subscriber, n int) []string {
	t.Helper()
	if err := sub.(relay.Provisioner).Provision(context.Background(), "in"); err != nil {
		t.Fatal(err)
	}
	msgs := make([]*relay.Message, n)
	ids := make([]string, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(strconv.Itoa(i)))
		ids[i] = msgs[i].ID
	}
	if err := pub.Publish(context.Background(), "in", msgs...); err != nil {
		t.Fatal(err)
	}
	return ids
}

// delivery is one message as a batch handler saw it.
type delivery struct {
	id      string
	attempt int
}

// recorder keeps what a batch handler saw.
type recorder struct {
	mu      sync.Mutex
	batches [][]delivery
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) add(msgs []*relay.Message) {
	b := make([]delivery, len(msgs))
	for i, m := range msgs {
		b[i] = delivery{m.ID, m.Attempt()}
	}
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() [][]delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// seen counts the deliveries of each ID and returns them in order.
func (r *recorder) seen() (all []delivery, count map[string]int) {
	count = map[string]int{}
	for _, b := range r.snapshot() {
		for _, d := range b {
			all = append(all, d)
			count[d.id]++
		}
	}
	return all, count
}

// waitFor waits until cond holds for what was seen.
func (r *recorder) waitFor(t *testing.T, what string, cond func(all []delivery) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		all, _ := r.seen()
		if cond(all) {
			return
		}
		select {
		case <-r.changed:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; seen %v", what, all)
		}
	}
}

func TestBatchOrderAndAck(t *testing.T) {
	broker := "batch-order-" + relay.NewID()
	pub, sub := memPair(t, broker, "g", 256)
	ids := publishN(t, pub, sub, 250)
	rec := newRecorder()
	r := newRouter(t, router.Config{})
	if err := r.AddBatchHandler("bulk", sub, "in", func(_ context.Context, msgs []*relay.Message) error {
		rec.add(msgs)
		return nil
	}, router.WithBatchSize(100), router.WithBatchWait(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	rec.waitFor(t, "250 messages", func(all []delivery) bool { return len(all) >= 250 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var got []string
	var sizes []int
	for _, b := range rec.snapshot() {
		if len(b) < 1 || len(b) > 100 {
			t.Errorf("batch of %d messages", len(b))
		}
		sizes = append(sizes, len(b))
		for _, d := range b {
			got = append(got, d.id)
			if d.attempt != 1 {
				t.Errorf("message %s delivered with attempt %d", d.id, d.attempt)
			}
		}
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("handled %d messages, not each once in publish order", len(got))
	}
	t.Logf("batch sizes %v", sizes)
	// Every message was acked: the group holds nothing.
	relaytest.WaitLag(t, relaytest.LagOf(t, sub), "in", 0)
}

func TestBatchWait(t *testing.T) {
	const wait = 300 * time.Millisecond
	broker := "batch-wait-" + relay.NewID()
	pub, sub := memPair(t, broker, "g", 64)
	ids := publishN(t, pub, sub, 3)
	rec := newRecorder()
	var calledAfter time.Duration
	r := newRouter(t, router.Config{})
	start := time.Now()
	if err := r.AddBatchHandler("bulk", sub, "in", func(_ context.Context, msgs []*relay.Message) error {
		if calledAfter == 0 {
			calledAfter = time.Since(start)
		}
		rec.add(msgs)
		return nil
	}, router.WithBatchSize(100), router.WithBatchWait(wait)); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	rec.waitFor(t, "a batch", func(all []delivery) bool { return len(all) > 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	batches := rec.snapshot()
	if len(batches) != 1 || len(batches[0]) != 3 {
		t.Fatalf("batches %v, want one of 3 messages", batches)
	}
	for i, d := range batches[0] {
		if d.id != ids[i] {
			t.Fatalf("batch %v not in publish order %v", batches[0], ids)
		}
	}
	// The batch was not full: it was handed over only when the wait after
	// its first message had passed.
	if calledAfter < wait {
		t.Fatalf("handler called %v after Run, before the wait of %v", calledAfter, wait)
	}
	relaytest.WaitLag(t, relaytest.LagOf(t, sub), "in", 0)
}

func TestBatchSizeAndNoWait(t *testing.T) {
	f := newFakeSub()
	sub := &bufSub{fakeSub: f}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		sub.msgs = append(sub.msgs, f.msg(id, "", 1))
	}
	rec := newRecorder()
	r := newRouter(t, router.Config{})
	if err := r.AddBatchHandler("bulk", sub, "in", func(_ context.Context, msgs []*relay.Message) error {
		rec.add(msgs)
		return nil
	}, router.WithBatchSize(2), router.WithBatchWait(0)); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	// With no wait the last batch, one message, goes at once.
	f.waitSettled(t, "e")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, b := range rec.snapshot() {
		var ids []string
		for _, d := range b {
			ids = append(ids, d.id)
		}
		got = append(got, ids)
	}
	want := [][]string{{"a", "b"}, {"c", "d"}, {"e"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	if ev := f.events(); !slices.Equal(ev, []string{"ack:a", "ack:b", "ack:c", "ack:d", "ack:e"}) {
		t.Fatalf("settlements %v", ev)
	}
}

func TestBatchErrorNacksNamedOnly(t *testing.T) {
	broker := "batch-partial-" + relay.NewID()
	pub, sub := memPair(t, broker, "g", 64)
	ids := publishN(t, pub, sub, 10)
	failing := map[string]bool{ids[2]: true, ids[7]: true}
	rec := newRecorder()
	var logs logBuf
	r := newRouter(t, router.Config{Logger: logs.logger(), RedeliveryDelay: func(*relay.Message, error) time.Duration { return 10 * time.Millisecond }})
	if err := r.AddBatchHandler("bulk", sub, "in", func(_ context.Context, msgs []*relay.Message) error {
		rec.add(msgs)
		be := &router.BatchError{Failed: map[string]error{"not-in-batch": errors.New("ignored")}}
		for _, m := range msgs {
			if failing[m.ID] && m.Attempt() == 1 {
				be.Failed[m.ID] = fmt.Errorf("row %s rejected", m.ID)
			}
		}
		if len(be.Failed) == 1 {
			return nil
		}
		return fmt.Errorf("bulk insert: %w", be)
	}, router.WithBatchSize(100), router.WithBatchWait(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	rec.waitFor(t, "the failed messages again", func(all []delivery) bool {
		n := 0
		for _, d := range all {
			if d.attempt == 2 {
				n++
			}
		}
		return n >= 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	all, count := rec.seen()
	for _, id := range ids {
		want := 1
		if failing[id] {
			want = 2
		}
		if count[id] != want {
			t.Errorf("message %s handled %d times, want %d (failing: %v)", id, count[id], want, failing[id])
		}
	}
	for _, d := range all {
		if d.attempt == 2 && !failing[d.id] {
			t.Errorf("acked message %s redelivered", d.id)
		}
	}
	if left := readUntilSentinel(t, broker, "g", "in"); len(left) != 0 {
		t.Fatalf("group still holds %v", left)
	}
	if n := strings.Count(logs.String(), "handler failed"); n != 2 {
		t.Fatalf("%d failures logged, want 2:\n%s", n, logs.String())
	}
}

func TestBatchErrorDelays(t *testing.T) {
	f := newFakeSub()
	var mu sync.Mutex
	errsOf := map[string]error{}
	exp := router.ExponentialRedelivery(time.Second, 5*time.Second)
	r := newRouter(t, router.Config{RedeliveryDelay: func(m *relay.Message, err error) time.Duration {
		mu.Lock()
		errsOf[m.ID] = err
		mu.Unlock()
		return exp(m, err)
	}})
	errA := errors.New("a failed")
	if err := r.AddBatchHandler("bulk", f, "in", func(_ context.Context, msgs []*relay.Message) error {
		return &router.BatchError{Failed: map[string]error{"a": errA, "b": nil, "zz": errors.New("not in batch")}}
	}, router.WithBatchSize(3), router.WithBatchWait(time.Minute)); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	// The batch fills at 3 messages, long before the wait.
	f.push(t, f.msg("a", "", 1))
	f.push(t, f.msg("b", "", 3))
	f.push(t, f.msg("c", "", 1))
	if s := f.waitSettled(t, "a"); s.Ack || s.Delay != time.Second {
		t.Errorf("a settled %+v, want nack after 1s", s)
	}
	if s := f.waitSettled(t, "b"); s.Ack || s.Delay != 4*time.Second {
		t.Errorf("b (attempt 3) settled %+v, want nack after 4s", s)
	}
	if s := f.waitSettled(t, "c"); !s.Ack {
		t.Errorf("c settled %+v, want ack", s)
	}
	if ev := f.events(); len(ev) != 3 {
		t.Fatalf("settlements %v", ev)
	}
	mu.Lock()
	defer mu.Unlock()
	var be *router.BatchError
	if errsOf["a"] != errA || !errors.As(errsOf["b"], &be) || len(errsOf) != 2 {
		t.Fatalf("RedeliveryDelay got errors %v", errsOf)
	}
}

func TestBatchFailureNacksAll(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  func() error
		check func(error) bool
	}{
		{"error", func() error { return errors.New("database down") }, func(err error) bool { return err.Error() == "database down" }},
		{"panic", func() error { panic("kaboom") }, func(err error) bool {
			var pe *router.PanicError
			return errors.As(err, &pe) && pe.Value == "kaboom" && strings.Contains(string(pe.Stack), "batch_test")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broker := "batch-fail-" + relay.NewID()
			pub, sub := memPair(t, broker, "g", 64)
			ids := publishN(t, pub, sub, 10)
			rec := newRecorder()
			var logs logBuf
			var mu sync.Mutex
			var delayErrs []error
			r := newRouter(t, router.Config{Logger: logs.logger(), RedeliveryDelay: func(_ *relay.Message, err error) time.Duration {
				mu.Lock()
				delayErrs = append(delayErrs, err)
				mu.Unlock()
				return 0
			}})
			if err := r.AddBatchHandler("bulk", sub, "in", func(_ context.Context, msgs []*relay.Message) error {
				rec.add(msgs)
				if msgs[0].Attempt() == 1 {
					return tc.fail()
				}
				return nil
			}, router.WithBatchSize(10), router.WithBatchWait(time.Minute)); err != nil { // the batch fills with all 10
				t.Fatal(err)
			}
			stop := runRouter(t, r)
			rec.waitFor(t, "every message twice", func(all []delivery) bool { return len(all) >= 20 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			all, count := rec.seen()
			attempts := map[string][]int{}
			for _, d := range all {
				attempts[d.id] = append(attempts[d.id], d.attempt)
			}
			for _, id := range ids {
				if count[id] != 2 || !slices.Equal(attempts[id], []int{1, 2}) {
					t.Errorf("message %s handled with attempts %v, want [1 2]", id, attempts[id])
				}
			}
			if len(all) != 20 {
				t.Errorf("%d deliveries, want 20", len(all))
			}
			mu.Lock()
			if len(delayErrs) != 10 {
				t.Errorf("RedeliveryDelay called %d times, want 10", len(delayErrs))
			}
			for _, err := range delayErrs {
				if !tc.check(err) {
					t.Errorf("RedeliveryDelay got %v", err)
				}
			}
			mu.Unlock()
			if n := strings.Count(logs.String(), "handler failed"); n != 10 {
				t.Errorf("%d failures logged, want 10", n)
			}
			if left := readUntilSentinel(t, broker, "g", "in"); len(left) != 0 {
				t.Fatalf("group still holds %v", left)
			}
		})
	}
}

func TestBatchHandlerSettlesItself(t *testing.T) {
	t.Run("nack on success", func(t *testing.T) {
		broker := "batch-self-" + relay.NewID()
		pub, sub := memPair(t, broker, "g", 64)
		ids := publishN(t, pub, sub, 5)
		nacked, acked := ids[1], ids[3]
		rec := newRecorder()
		var logs logBuf
		r := newRouter(t, router.Config{Logger: logs.logger()})
		if err := r.AddBatchHandler("bulk", sub, "in", func(_ context.Context, msgs []*relay.Message) error {
			rec.add(msgs)
			for _, m := range msgs {
				if m.Attempt() > 1 {
					continue
				}
				switch m.ID {
				case nacked:
					_ = m.Nack()
				case acked:
					_ = m.Ack()
				}
			}
			return nil
		}, router.WithBatchSize(100), router.WithBatchWait(100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		stop := runRouter(t, r)
		rec.waitFor(t, "the nacked message again", func(all []delivery) bool {
			return slices.Contains(all, delivery{nacked, 2})
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		_, count := rec.seen()
		for _, id := range ids {
			want := 1
			if id == nacked {
				want = 2
			}
			if count[id] != want {
				t.Errorf("message %s handled %d times, want %d", id, count[id], want)
			}
		}
		if left := readUntilSentinel(t, broker, "g", "in"); len(left) != 0 {
			t.Fatalf("group still holds %v", left)
		}
		for _, bad := range []string{"handler failed", "ack failed", "nack failed", "level=WARN", "level=ERROR"} {
			if strings.Contains(logs.String(), bad) {
				t.Fatalf("log has %q:\n%s", bad, logs.String())
			}
		}
	})
	t.Run("ack on failure", func(t *testing.T) {
		f := newFakeSub()
		var logs logBuf
		r := newRouter(t, router.Config{Logger: logs.logger(), RedeliveryDelay: router.NoRedeliveryDelay})
		if err := r.AddBatchHandler("bulk", f, "in", func(_ context.Context, msgs []*relay.Message) error {
			_ = msgs[0].Ack()
			return errors.New("the rest failed")
		}, router.WithBatchSize(3), router.WithBatchWait(time.Minute)); err != nil {
			t.Fatal(err)
		}
		runRouter(t, r)
		for _, id := range []string{"m1", "m2", "m3"} {
			f.push(t, f.msg(id, "", 1))
		}
		f.waitSettled(t, "m3")
		f.waitSettled(t, "m2")
		if ev := f.events(); !slices.Equal(ev, []string{"ack:m1", "nack:m2", "nack:m3"}) {
			t.Fatalf("settlements %v", ev)
		}
		if n := strings.Count(logs.String(), "handler failed"); n != 2 {
			t.Fatalf("%d failures logged, want 2:\n%s", n, logs.String())
		}
	})
}

func TestBatchShutdownDrainsBatchInHandler(t *testing.T) {
	const total, size = 30, 10
	broker := "batch-drain-" + relay.NewID()
	pub, sub := memPair(t, broker, "g", 64)
	ids := publishN(t, pub, sub, total)
	rec := newRecorder()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	stopping := make(chan (<-chan struct{}), 1)
	var ctxErr, msgCtxErr error
	r := newRouter(t, router.Config{CloseTimeout: time.Minute})
	if err := r.AddBatchHandler("bulk", sub, "in", func(ctx context.Context, msgs []*relay.Message) error {
		rec.add(msgs)
		select {
		case stopping <- router.Stopping(ctx):
			started <- struct{}{}
		default:
		}
		<-release
		ctxErr = ctx.Err()
		for _, m := range msgs {
			msgCtxErr = errors.Join(msgCtxErr, m.Context().Err())
		}
		return nil
	}, router.WithBatchSize(size), router.WithBatchWait(time.Minute)); err != nil {
		t.Fatal(err)
	}
	r.Own(sub)
	stop := runRouter(t, r)
	<-started
	closed := make(chan error, 1)
	go func() { closed <- stop() }()
	<-<-stopping // the drain began while the batch is in the handler
	select {
	case <-r.Done():
		t.Fatal("router stopped without waiting for the batch in the handler")
	default:
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if ctxErr != nil || msgCtxErr != nil {
		t.Fatalf("batch in the handler saw a cancelled context: handler ctx %v, message ctx %v", ctxErr, msgCtxErr)
	}
	batches := rec.snapshot()
	if len(batches) != 1 || len(batches[0]) != size {
		t.Fatalf("batches %v, want one of %d messages", batches, size)
	}
	var handled []string
	for _, d := range batches[0] {
		handled = append(handled, d.id)
	}
	if !slices.Equal(handled, ids[:size]) {
		t.Fatalf("handled %v, want the first %d messages", handled, size)
	}
	// The handled batch was acked; everything else, including messages
	// delivered while the batch was in the handler, is still the group's.
	left := readUntilSentinel(t, broker, "g", "in")
	if !slices.Equal(left, ids[size:]) {
		t.Fatalf("group holds %d messages, want the %d not handled", len(left), total-size)
	}
}

func TestBatchShutdownWhileCollecting(t *testing.T) {
	f := newFakeSub()
	called := make(chan struct{}, 1)
	r := newRouter(t, router.Config{})
	if err := r.AddBatchHandler("bulk", f, "in", func(context.Context, []*relay.Message) error {
		called <- struct{}{}
		return nil
	}, router.WithBatchSize(10), router.WithBatchWait(time.Minute)); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	f.push(t, f.msg("a", "", 1))
	f.push(t, f.msg("b", "", 1))
	f.push(t, f.msg("c", "", 1)) // returns once b was taken by the router
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-called:
		t.Fatal("a batch that was not full was handled on shutdown")
	default:
	}
	ev := f.events()
	if len(ev) < 2 || ev[0] != "nack:a" || ev[1] != "nack:b" || (len(ev) == 3 && ev[2] != "nack:c") || len(ev) > 3 {
		t.Fatalf("settlements %v, want a and b (and maybe c) nacked", ev)
	}
	for _, id := range []string{"a", "b"} {
		if s := f.waitSettled(t, id); s.Delay != 0 {
			t.Fatalf("%s nacked with delay %v, want at once", id, s.Delay)
		}
	}
}

func TestBatchCloseTimeout(t *testing.T) {
	f := newFakeSub()
	started := make(chan struct{})
	r := newRouter(t, router.Config{CloseTimeout: 20 * time.Millisecond, RedeliveryDelay: router.NoRedeliveryDelay})
	if err := r.AddBatchHandler("slow", f, "in", func(ctx context.Context, _ []*relay.Message) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, router.WithBatchSize(2)); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	f.push(t, f.msg("a", "", 1))
	f.push(t, f.msg("b", "", 1))
	<-started
	if err := stop(); !errors.Is(err, router.ErrCloseTimeout) {
		t.Fatalf("shutdown: %v, want ErrCloseTimeout", err)
	}
	if ev := f.events(); !slices.Equal(ev, []string{"nack:a", "nack:b"}) {
		t.Fatalf("settlements %v", ev)
	}
}

func TestBatchSubscriptionEnds(t *testing.T) {
	f := newFakeSub()
	r := newRouter(t, router.Config{})
	called := false
	if err := r.AddBatchHandler("bulk", f, "in", func(context.Context, []*relay.Message) error {
		called = true
		return nil
	}, router.WithBatchSize(10), router.WithBatchWait(time.Minute)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(context.Background()) }()
	<-r.Running()
	f.push(t, f.msg("a", "", 1))
	close(f.in)
	if err := <-errc; !errors.Is(err, router.ErrSubscriptionEnded) {
		t.Fatalf("Run: %v", err)
	}
	if called {
		t.Fatal("handler called with a batch of an ended subscription")
	}
}

func TestBatchHandlerContextWithoutMiddleware(t *testing.T) {
	f := newFakeSub()
	r := newRouter(t, router.Config{})
	var mwCalls int
	var mu sync.Mutex
	_ = r.Use(func(next router.Handler) router.Handler {
		return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			mu.Lock()
			mwCalls++
			mu.Unlock()
			return next(ctx, m)
		}
	})
	type seen struct {
		name, topic string
		stopping    bool
	}
	got := make(chan seen, 1)
	if err := r.AddBatchHandler("bulk", f, "orders", func(ctx context.Context, msgs []*relay.Message) error {
		got <- seen{router.HandlerName(ctx), router.Topic(ctx), router.Stopping(ctx) != nil}
		return nil
	}, router.WithBatchWait(0)); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	f.push(t, f.msg("m1", "", 1))
	if s := f.waitSettled(t, "m1"); !s.Ack {
		t.Fatal("not acked")
	}
	if s := <-got; s != (seen{"bulk", "orders", true}) {
		t.Fatalf("handler ctx: %+v", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if mwCalls != 0 {
		t.Fatalf("router middleware ran %d times for a batch handler", mwCalls)
	}
}

func TestAddBatchHandlerValidation(t *testing.T) {
	r := newRouter(t, router.Config{})
	bh := func(context.Context, []*relay.Message) error { return nil }
	h := func(context.Context, *relay.Message) ([]*relay.Message, error) { return nil, nil }
	err := r.AddBatchHandler("", nil, "", nil, router.WithBatchSize(0), router.WithBatchWait(-time.Second))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"name is empty", "subscriber is nil", "invalid topic", "handler func is nil", "batch size 0", "batch wait -1s is negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if !errors.Is(err, relay.ErrInvalidTopic) {
		t.Errorf("error %q does not wrap relay.ErrInvalidTopic", err)
	}
	sub := newFakeSub()
	if err := r.AddBatchHandler("x", sub, "t", bh); err != nil {
		t.Fatal(err)
	}
	if err := r.AddBatchHandler("x", sub, "t2", bh); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate batch handler name: %v", err)
	}
	if err := r.AddHandler("x", sub, "t2", h); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("handler named like a batch handler: %v", err)
	}
	if err := r.AddHandler("y", newFakeSub(), "t3", h); err != nil {
		t.Fatal(err)
	}
	if err := r.AddBatchHandler("y", sub, "t4", bh); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("batch handler named like a handler: %v", err)
	}
	runRouter(t, r)
	if err := r.AddBatchHandler("z", newFakeSub(), "in", bh); !errors.Is(err, router.ErrRunning) {
		t.Fatalf("AddBatchHandler after Run: %v", err)
	}
}

func TestBatchErrorMessage(t *testing.T) {
	e := &router.BatchError{Failed: map[string]error{"c": errors.New("x"), "a": errors.New("y"), "b": errors.New("z"), "d": errors.New("w")}}
	if got, want := e.Error(), "router: batch: 4 failed: a: y; b: z; c: x; …"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

// Batch middleware wraps batch handlers only: router-level (UseBatch, also
// when called after AddBatchHandler) outside handler-level
// (WithBatchMiddleware), first given outermost; the error a batch
// middleware returns settles the batch.
func TestBatchMiddlewareOrderAndSettlement(t *testing.T) {
	f := newFakeSub()
	r := newRouter(t, router.Config{})
	var mu sync.Mutex
	var calls []string
	mark := func(name string, fail error) router.BatchMiddleware {
		return func(next router.BatchHandler) router.BatchHandler {
			return func(ctx context.Context, msgs []*relay.Message) error {
				mu.Lock()
				calls = append(calls, name+">"+strconv.Itoa(len(msgs)))
				mu.Unlock()
				err := next(ctx, msgs)
				mu.Lock()
				calls = append(calls, "<"+name)
				mu.Unlock()
				if fail != nil && msgs[0].ID == "m2" {
					return fail
				}
				return err
			}
		}
	}
	var perMessage int
	_ = r.Use(func(next router.Handler) router.Handler {
		return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			perMessage++
			return next(ctx, m)
		}
	})
	if err := r.AddBatchHandler("bulk", f, "in", func(ctx context.Context, msgs []*relay.Message) error {
		mu.Lock()
		calls = append(calls, "h:"+router.HandlerName(ctx))
		mu.Unlock()
		return nil
	}, router.WithBatchWait(0), router.WithBatchMiddleware(mark("c", errors.New("declined by c")), mark("d", nil))); err != nil {
		t.Fatal(err)
	}
	if err := r.UseBatch(mark("a", nil), mark("b", nil)); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	if err := r.UseBatch(mark("late", nil)); !errors.Is(err, router.ErrRunning) {
		t.Fatalf("UseBatch while running: %v, want ErrRunning", err)
	}
	f.push(t, f.msg("m1", "", 1))
	if s := f.waitSettled(t, "m1"); !s.Ack {
		t.Fatal("m1 not acked")
	}
	f.push(t, f.msg("m2", "", 1))
	if s := f.waitSettled(t, "m2"); s.Ack {
		t.Fatal("m2 acked although batch middleware c returned an error")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"a>1", "b>1", "c>1", "d>1", "h:bulk", "<d", "<c", "<b", "<a"}
	want = append(want, want...)
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	if perMessage != 0 {
		t.Fatalf("per-message middleware ran %d times for a batch handler", perMessage)
	}
}
