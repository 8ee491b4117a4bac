package driver

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// scriptPub is a PublishDriver whose attempts answer as script says
// (n: the attempt, from 1). It records the IDs of each attempt and the
// messages each attempt stored: all of them on nil, none on a whole-call
// error, those not named on a *relay.PublishError.
type scriptPub struct {
	mu       sync.Mutex
	maxB     int
	script   func(n int, msgs []*relay.Message) error
	attempts [][]string
	stored   []string
}

func (f *scriptPub) SendBatch(_ context.Context, _ string, msgs []*relay.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, ids(msgs))
	err := f.script(len(f.attempts), msgs)
	var pe *relay.PublishError
	switch {
	case err == nil:
		f.stored = append(f.stored, ids(msgs)...)
	case errors.As(err, &pe):
		for _, m := range msgs {
			if !slices.Contains(pe.FailedIDs(), m.ID) {
				f.stored = append(f.stored, m.ID)
			}
		}
	}
	return err
}
func (f *scriptPub) Capabilities() relay.Capabilities {
	return relay.Capabilities{Backend: "fake", MaxBatch: f.maxB}
}
func (f *scriptPub) Close() error { return nil }

// wholeScriptPub is a scriptPub that is a WholeSender.
type wholeScriptPub struct{ scriptPub }

func (f *wholeScriptPub) SendAll(ctx context.Context, topic string, msgs []*relay.Message) error {
	return f.SendBatch(ctx, topic, msgs)
}

func ids(msgs []*relay.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// noPause makes p send again at once, recording the backoff delays.
func noPause(p *Publisher) *[]time.Duration {
	var mu sync.Mutex
	delays := new([]time.Duration)
	p.pause = func(ctx context.Context, d time.Duration) bool {
		mu.Lock()
		*delays = append(*delays, d)
		mu.Unlock()
		return ctx.Err() == nil
	}
	return delays
}

var errDown = errors.New("connection refused")

// A whole-call error marked Retryable is sent again, whole, until the
// driver accepts the batch; each message is stored once, and a batch is
// settled before the next of the same Publish call is sent.
func TestRetryableWholeCallSentAgainUntilAccepted(t *testing.T) {
	f := &scriptPub{maxB: 2, script: func(n int, _ []*relay.Message) error {
		if n <= 3 {
			return Retryable(errDown)
		}
		return nil
	}}
	p := NewPublisher(f, 0)
	defer p.Close()
	delays := noPause(p)
	ms := msgs(4)
	if err := p.Publish(context.Background(), "t", ms...); err != nil {
		t.Fatal(err)
	}
	first, second := ids(ms[:2]), ids(ms[2:])
	want := [][]string{first, first, first, first, second}
	if !slices.EqualFunc(f.attempts, want, slices.Equal) {
		t.Errorf("attempts %v, want %v", f.attempts, want)
	}
	if !slices.Equal(f.stored, ids(ms)) {
		t.Errorf("stored %v, want each of %v once, in order", f.stored, ids(ms))
	}
	if len(*delays) != 3 {
		t.Errorf("%d backoff pauses, want 3", len(*delays))
	}
}

// Of a *relay.PublishError, only the entries marked Retryable are sent
// again; a permanent entry is reported at once, with its own error, in
// the final PublishError, which names exactly the failed IDs. The same
// holds for a WholeSender.
func TestRetryOnlyRetryableEntries(t *testing.T) {
	permanent := errors.New("rejected")
	for _, whole := range []bool{false, true} {
		var f *scriptPub
		var d PublishDriver
		if whole {
			w := &wholeScriptPub{}
			f, d = &w.scriptPub, w
		} else {
			f = &scriptPub{}
			d = f
		}
		ms := msgs(3)
		f.script = func(n int, got []*relay.Message) error {
			if n == 1 {
				return &relay.PublishError{Failed: []relay.MessageFailure{
					{ID: ms[1].ID, Err: Retryable(errDown)}, {ID: ms[2].ID, Err: permanent}}}
			}
			return nil
		}
		p := NewPublisher(d, 0)
		noPause(p)
		err := p.Publish(context.Background(), "t", ms...)
		_ = p.Close()
		var pe *relay.PublishError
		if !errors.As(err, &pe) || !slices.Equal(pe.FailedIDs(), []string{ms[2].ID}) {
			t.Fatalf("whole=%v: Publish: %v, want a PublishError naming only %s", whole, err, ms[2].ID)
		}
		if !errors.Is(pe.Failed[0].Err, permanent) || IsRetryable(pe.Failed[0].Err) {
			t.Errorf("whole=%v: failure %v, want the permanent error as it is", whole, pe.Failed[0].Err)
		}
		want := [][]string{ids(ms), {ms[1].ID}}
		if !slices.EqualFunc(f.attempts, want, slices.Equal) {
			t.Errorf("whole=%v: attempts %v, want %v", whole, f.attempts, want)
		}
		if !slices.Equal(f.stored, []string{ms[0].ID, ms[1].ID}) {
			t.Errorf("whole=%v: stored %v, want %s and %s once each", whole, f.stored, ms[0].ID, ms[1].ID)
		}
	}
}

// When ctx ends while messages are still to be sent again, they fail
// with an error that names ctx's error and the last broker error (and
// wraps both, without the Retryable mark); a permanent failure of the
// same batch keeps its own error. A batch that failed as a whole stays a
// plain error.
func TestRetryEndsWithCtx(t *testing.T) {
	t.Run("whole", func(t *testing.T) {
		f := &scriptPub{script: func(int, []*relay.Message) error { return Retryable(errDown) }}
		p := NewPublisher(f, 0)
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		p.pause = func(ctx context.Context, _ time.Duration) bool {
			if len(f.attempts) < 2 {
				return true
			}
			<-ctx.Done()
			return false
		}
		err := p.Publish(ctx, "t", msgs(2)...)
		var pe *relay.PublishError
		if errors.As(err, &pe) {
			t.Fatalf("Publish: %v, want a plain error", err)
		}
		if want := "relay/fake: context deadline exceeded (last error: connection refused)"; err == nil || err.Error() != want {
			t.Fatalf("Publish: %v, want %q", err, want)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errDown) || IsRetryable(err) {
			t.Errorf("Publish: %v: want it to wrap ctx's error and the last error, unmarked", err)
		}
		if len(f.attempts) != 2 {
			t.Errorf("%d attempts, want 2", len(f.attempts))
		}
	})
	t.Run("entries", func(t *testing.T) {
		permanent := errors.New("rejected")
		ms := msgs(3)
		f := &scriptPub{script: func(n int, _ []*relay.Message) error {
			fs := []relay.MessageFailure{{ID: ms[1].ID, Err: Retryable(errors.New("timeout"))}}
			if n == 1 {
				fs = append(fs, relay.MessageFailure{ID: ms[2].ID, Err: permanent})
			}
			return &relay.PublishError{Failed: fs}
		}}
		p := NewPublisher(f, 0)
		defer p.Close()
		ctx, cancel := context.WithCancel(context.Background())
		p.pause = func(ctx context.Context, _ time.Duration) bool {
			if len(f.attempts) == 3 {
				cancel()
			}
			return ctx.Err() == nil
		}
		err := p.Publish(ctx, "t", ms...)
		var pe *relay.PublishError
		if !errors.As(err, &pe) || !slices.Equal(pe.FailedIDs(), []string{ms[2].ID, ms[1].ID}) {
			t.Fatalf("Publish: %v, want a PublishError naming %s and %s", err, ms[2].ID, ms[1].ID)
		}
		if !errors.Is(pe.Failed[0].Err, permanent) {
			t.Errorf("permanent failure: %v", pe.Failed[0].Err)
		}
		if got, want := pe.Failed[1].Err.Error(), "relay/fake: context canceled (last error: timeout)"; got != want {
			t.Errorf("retried failure: %q, want %q", got, want)
		}
		if len(f.attempts) != 3 {
			t.Errorf("%d attempts, want 3", len(f.attempts))
		}
	})
}

// Errors not marked Retryable are reported at once, after one attempt.
func TestNotRetryableReportedAtOnce(t *testing.T) {
	f := &scriptPub{script: func(int, []*relay.Message) error { return errDown }}
	p := NewPublisher(f, 0)
	defer p.Close()
	delays := noPause(p)
	if err := p.Publish(context.Background(), "t", msgs(2)...); err != errDown {
		t.Fatalf("Publish: %v, want the driver's error as it is", err)
	}
	if len(f.attempts) != 1 || len(*delays) != 0 {
		t.Errorf("%d attempts and %d pauses, want 1 and 0", len(f.attempts), len(*delays))
	}
}

// The delay between attempts grows: 100ms doubling up to 5s, each drawn
// from the upper half of its step.
func TestRetryBackoffGrows(t *testing.T) {
	const fails = 9
	f := &scriptPub{script: func(n int, _ []*relay.Message) error {
		if n <= fails {
			return Retryable(errDown)
		}
		return nil
	}}
	p := NewPublisher(f, 0)
	defer p.Close()
	delays := noPause(p)
	if err := p.Publish(context.Background(), "t", msgs(1)...); err != nil {
		t.Fatal(err)
	}
	if len(*delays) != fails {
		t.Fatalf("%d pauses, want %d", len(*delays), fails)
	}
	step := 100 * time.Millisecond
	for i, d := range *delays {
		if d < step/2 || d > step {
			t.Errorf("pause %d: %v, want within [%v, %v]", i+1, d, step/2, step)
		}
		step = min(2*step, 5*time.Second)
	}
}

// PublishAsync, when it runs on the Publisher's goroutine (no
// AsyncSender), sends Retryable failures again as Publish does.
func TestPublishAsyncRetries(t *testing.T) {
	f := &scriptPub{script: func(n int, _ []*relay.Message) error {
		if n <= 2 {
			return Retryable(errDown)
		}
		return nil
	}}
	p := NewPublisher(f, 0)
	defer p.Close()
	noPause(p)
	ms := msgs(2)
	done := make(chan error, 1)
	if err := p.PublishAsync(context.Background(), "t", ms, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("done: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.attempts) != 3 || !slices.Equal(f.stored, ids(ms)) {
		t.Errorf("attempts %v, stored %v; want 3 attempts and each message stored once", f.attempts, f.stored)
	}
}
