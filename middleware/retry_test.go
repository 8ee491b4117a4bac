package middleware_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

var errFlaky = errors.New("flaky")

// failing returns a handler that fails its first n calls, counting calls.
func failing(n int, calls *int) router.Handler {
	return func(context.Context, *relay.Message) ([]*relay.Message, error) {
		*calls++
		if *calls <= n {
			return nil, errFlaky
		}
		return []*relay.Message{relay.NewMessage([]byte("out"))}, nil
	}
}

func TestRetryCountsAndBackoffSequence(t *testing.T) {
	clk := newFakeClock()
	var hooked []time.Duration
	obs := &recordingObserver{}
	retry := must(middleware.Retry(middleware.RetryConfig{
		MaxAttempts:     6,
		InitialInterval: 10 * time.Millisecond,
		MaxInterval:     50 * time.Millisecond,
		Multiplier:      2,
		NoJitter:        true,
		Now:             clk.Now,
		After:           clk.After,
		// Reporting the delay must not advance the backoff (Watermill's
		// NextBackOff bug doubled the gaps when hooks were set).
		OnRetry: func(_ context.Context, _ *relay.Message, ev middleware.RetryEvent) {
			hooked = append(hooked, ev.Delay)
		},
	}))
	calls := 0
	h := retry(failing(100, &calls))
	_, err := h(middleware.WithObserver(handlerCtx(), obs), relay.NewMessage(nil))

	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
	if calls != 6 {
		t.Fatalf("%d calls, want 6", calls)
	}
	if got := clk.Slept(); !slices.Equal(got, want) {
		t.Fatalf("slept %v, want %v", got, want)
	}
	if !slices.Equal(hooked, want) {
		t.Fatalf("OnRetry saw %v, want %v", hooked, want)
	}
	if got := obs.retryDelays(); !slices.Equal(got, want) {
		t.Fatalf("observer saw %v, want %v", got, want)
	}
	var re *middleware.RetryError
	if !errors.As(err, &re) || re.Attempts != 6 || re.Reason != middleware.RetryExhausted || !errors.Is(err, errFlaky) {
		t.Fatalf("error %v", err)
	}
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if !re.FirstFailed.Equal(start) || !re.LastFailed.Equal(start.Add(170*time.Millisecond)) {
		t.Fatalf("failure times %v .. %v", re.FirstFailed, re.LastFailed)
	}
}

func TestRetryRecovers(t *testing.T) {
	clk := newFakeClock()
	retry := must(middleware.Retry(middleware.RetryConfig{MaxAttempts: 5, NoJitter: true, Now: clk.Now, After: clk.After}))
	calls := 0
	outs, err := retry(failing(2, &calls))(handlerCtx(), relay.NewMessage(nil))
	if err != nil || calls != 3 || len(outs) != 1 {
		t.Fatalf("calls %d, outs %d, err %v", calls, len(outs), err)
	}
	// Defaults: 100ms doubling.
	if got := clk.Slept(); !slices.Equal(got, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}) {
		t.Fatalf("slept %v", got)
	}
}

func TestRetryDefaultsAreNotZeroTraps(t *testing.T) {
	clk := newFakeClock()
	retry := must(middleware.Retry(middleware.RetryConfig{Now: clk.Now, After: clk.After}))
	calls := 0
	_, err := retry(failing(100, &calls))(handlerCtx(), relay.NewMessage(nil))
	if calls != 3 {
		t.Fatalf("zero-value config ran %d attempts, want the default 3", calls)
	}
	// Default jitter 0.5: each wait within [d/2, d].
	for i, d := range clk.Slept() {
		full := 100 * time.Millisecond << i
		if d < full/2 || d > full {
			t.Fatalf("wait %d = %v, outside [%v, %v]", i, d, full/2, full)
		}
	}
	if err == nil {
		t.Fatal("no error")
	}
}

func TestRetryJitter(t *testing.T) {
	clk := newFakeClock()
	retry := must(middleware.Retry(middleware.RetryConfig{
		MaxAttempts: 3, InitialInterval: 100 * time.Millisecond, Jitter: 0.4,
		Rand: func() float64 { return 0.5 }, Now: clk.Now, After: clk.After,
	}))
	calls := 0
	_, _ = retry(failing(100, &calls))(handlerCtx(), relay.NewMessage(nil))
	// d × (1 - 0.4×0.5) = 0.8 d
	if got := clk.Slept(); !slices.Equal(got, []time.Duration{80 * time.Millisecond, 160 * time.Millisecond}) {
		t.Fatalf("slept %v", got)
	}
}

func TestRetrySkipsPermanentAndNonRetryable(t *testing.T) {
	clk := newFakeClock()
	errBad := errors.New("bad input")
	retry := must(middleware.Retry(middleware.RetryConfig{
		MaxAttempts: 5, Now: clk.Now, After: clk.After,
		Retryable: func(err error) bool { return !errors.Is(err, errBad) },
	}))
	for name, e := range map[string]error{"permanent": relay.Permanent(errFlaky), "not retryable": errBad} {
		calls := 0
		_, err := retry(func(context.Context, *relay.Message) ([]*relay.Message, error) {
			calls++
			return nil, e
		})(handlerCtx(), relay.NewMessage(nil))
		var re *middleware.RetryError
		if calls != 1 || !errors.As(err, &re) || re.Reason != middleware.RetryPermanent {
			t.Errorf("%s: %d calls, err %v", name, calls, err)
		}
	}
	calls := 0
	_, err := retry(func(context.Context, *relay.Message) ([]*relay.Message, error) {
		calls++
		return nil, relay.Permanent(errFlaky)
	})(handlerCtx(), relay.NewMessage(nil))
	if !relay.IsPermanent(err) {
		t.Fatal("permanence lost through RetryError")
	}
	if len(clk.Slept()) != 0 {
		t.Fatal("slept for a permanent error")
	}
}

func TestRetryMaxElapsed(t *testing.T) {
	clk := newFakeClock()
	retry := must(middleware.Retry(middleware.RetryConfig{
		MaxAttempts: 10, InitialInterval: 10 * time.Millisecond, NoJitter: true,
		MaxElapsed: 35 * time.Millisecond, Now: clk.Now, After: clk.After,
	}))
	calls := 0
	_, err := retry(failing(100, &calls))(handlerCtx(), relay.NewMessage(nil))
	// Waits 10 (ends at 10) and 20 (ends at 30); a wait of 40 would end at 70 > 35.
	var re *middleware.RetryError
	if calls != 3 || !errors.As(err, &re) || re.Reason != middleware.RetryElapsed {
		t.Fatalf("calls %d, err %v", calls, err)
	}
}

func TestRetryWaitCancelledByContext(t *testing.T) {
	retry := must(middleware.Retry(middleware.RetryConfig{MaxAttempts: 5, InitialInterval: time.Hour}))
	ctx, cancel := context.WithCancel(handlerCtx())
	calls := 0
	h := retry(func(context.Context, *relay.Message) ([]*relay.Message, error) {
		calls++
		if calls == 1 {
			time.AfterFunc(time.Millisecond, cancel)
		}
		return nil, errFlaky
	})
	_, err := h(ctx, relay.NewMessage(nil))
	var re *middleware.RetryError
	if calls != 1 || !errors.As(err, &re) || !re.Interrupted() {
		t.Fatalf("calls %d, err %v", calls, err)
	}
}

func TestRetryWaitCancelledByRouterShutdown(t *testing.T) {
	e := newEnv(t)
	sub := e.sub("g", "in")
	retry := must(middleware.Retry(middleware.RetryConfig{MaxAttempts: 5, InitialInterval: time.Hour}))
	r, err := router.New(router.Config{CloseTimeout: time.Hour, RedeliveryDelay: router.NoRedeliveryDelay, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Use(retry)
	failed := make(chan struct{})
	var once sync.Once
	_ = r.AddHandler("h", sub, "in", func(context.Context, *relay.Message) ([]*relay.Message, error) {
		once.Do(func() { close(failed) })
		return nil, errFlaky
	})
	r.Own(sub) // Run then returns only after the subscription has settled and released everything
	stop := run(t, r)
	m := relay.NewMessage(nil)
	e.publish("in", m)
	<-failed
	// Retry now waits an hour; shutdown must cut that wait short and the
	// message must go back to the group (not be lost, not be acked).
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	left := e.drain("g", "in")
	if len(left) != 1 || left[0].ID != m.ID {
		t.Fatalf("group holds %d messages", len(left))
	}
}

func TestTimeoutInsideRetryAppliesPerAttempt(t *testing.T) {
	retry := must(middleware.Retry(middleware.RetryConfig{MaxAttempts: 3, InitialInterval: time.Millisecond}))
	h := router.Chain(retry, middleware.Timeout(20*time.Millisecond))
	calls := 0
	var errs []error
	outs, err := h(func(ctx context.Context, _ *relay.Message) ([]*relay.Message, error) {
		calls++
		if calls == 1 {
			<-ctx.Done() // the first attempt times out
			return nil, ctx.Err()
		}
		errs = append(errs, ctx.Err())
		return []*relay.Message{relay.NewMessage(nil)}, nil
	})(handlerCtx(), relay.NewMessage(nil))
	if err != nil || calls != 2 || len(outs) != 1 || errs[0] != nil {
		t.Fatalf("calls %d, err %v, second attempt ctx %v", calls, err, errs)
	}
}

func TestRetryConfigValidation(t *testing.T) {
	_, err := middleware.Retry(middleware.RetryConfig{MaxAttempts: -1, Multiplier: 0.5, Jitter: 2, InitialInterval: time.Second, MaxInterval: time.Millisecond, MaxElapsed: -1})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"MaxAttempts", "Multiplier", "Jitter", "MaxInterval", "MaxElapsed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %s", err, want)
		}
	}
}

// recordingObserver records observer events.
type recordingObserver struct {
	mu       sync.Mutex
	retries  []middleware.RetryEvent
	poisoned []string
	dups     []string
}

func (o *recordingObserver) Retried(_ context.Context, _ *relay.Message, ev middleware.RetryEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retries = append(o.retries, ev)
}

func (o *recordingObserver) Poisoned(_ context.Context, m *relay.Message, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.poisoned = append(o.poisoned, m.ID)
}

func (o *recordingObserver) Deduplicated(_ context.Context, m *relay.Message, _ string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dups = append(o.dups, m.ID)
}

func (o *recordingObserver) retryDelays() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ds []time.Duration
	for _, ev := range o.retries {
		ds = append(ds, ev.Delay)
	}
	return ds
}
