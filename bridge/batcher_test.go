package bridge

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// fakePub records Publish calls and answers with fn.
type fakePub struct {
	mu    sync.Mutex
	calls [][]string
	fn    func(msgs []*relay.Message) error
}

func (f *fakePub) Publish(_ context.Context, _ string, msgs ...*relay.Message) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	f.mu.Lock()
	f.calls = append(f.calls, ids)
	f.mu.Unlock()
	if f.fn != nil {
		return f.fn(msgs)
	}
	return nil
}

func (f *fakePub) Close() error { return nil }

// sendReqs runs one flush of the messages with ids and returns each
// one's result.
func sendReqs(b *batcher, ids ...string) map[string]error {
	reqs := make([]*pubReq, len(ids))
	for i, id := range ids {
		reqs[i] = &pubReq{ctx: context.Background(), m: &relay.Message{ID: id}, done: make(chan error, 1)}
	}
	b.send(reqs)
	res := map[string]error{}
	for _, r := range reqs {
		res[r.m.ID] = <-r.done
	}
	return res
}

func TestBatcherSendsOneCall(t *testing.T) {
	f := &fakePub{}
	b := &batcher{pub: f, topic: "t", max: 100, timeout: time.Minute}
	res := sendReqs(b, "a", "b", "c", "d")
	for id, err := range res {
		if err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if len(f.calls) != 1 || len(f.calls[0]) != 4 {
		t.Errorf("calls %v, want one of 4 messages", f.calls)
	}
}

func TestBatcherMapsPartialFailure(t *testing.T) {
	boom := errors.New("boom")
	f := &fakePub{fn: func(msgs []*relay.Message) error {
		var failed []relay.MessageFailure
		for _, m := range msgs {
			if m.ID == "bad" {
				failed = append(failed, relay.MessageFailure{ID: m.ID, Err: boom})
			}
		}
		if failed != nil {
			return &relay.PublishError{Failed: failed}
		}
		return nil
	}}
	b := &batcher{pub: f, topic: "t", max: 100, timeout: time.Minute}
	res := sendReqs(b, "ok1", "bad", "ok2")
	if res["ok1"] != nil || res["ok2"] != nil || !errors.Is(res["bad"], boom) {
		t.Errorf("results %v", res)
	}
}

// A limit error fails a whole Publish call before anything is sent; the
// batcher then publishes one by one so that only the culprit fails.
func TestBatcherIsolatesRejectedMessage(t *testing.T) {
	f := &fakePub{fn: func(msgs []*relay.Message) error {
		for _, m := range msgs {
			if m.ID == "huge" {
				return &relay.LimitError{MessageID: m.ID, What: "payload", Limit: 1, Actual: 2}
			}
		}
		return nil
	}}
	b := &batcher{pub: f, topic: "t", max: 100, timeout: time.Minute}
	res := sendReqs(b, "a", "huge", "c")
	if res["a"] != nil || res["c"] != nil || !errors.Is(res["huge"], relay.ErrMessageTooLarge) {
		t.Errorf("results %v", res)
	}
	if len(f.calls) != 4 {
		t.Errorf("calls %v, want the batch then each message alone", f.calls)
	}
}

// Through the flusher goroutines: every publish gets its answer, and a
// caller whose ctx is done gets its error.
func TestBatcherPublish(t *testing.T) {
	f := &fakePub{}
	b := newBatcher(f, "t", 3, 2, time.Minute)
	defer b.close()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.publish(context.Background(), &relay.Message{ID: string(rune('A' + i))}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, c := range f.calls {
		if len(c) > 3 {
			t.Errorf("call of %d messages, max 3", len(c))
		}
		n += len(c)
	}
	if n != 50 {
		t.Errorf("%d messages published, want 50", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.publish(ctx, &relay.Message{ID: "late"}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
}
