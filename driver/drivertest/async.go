package drivertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// asyncPublish: where the publisher implements relay.AsyncPublisher, one
// goroutine keeps 40 calls of 5 messages in flight; every done is called
// exactly once with nil, every message arrives, and calls to one key of an
// ordering backend keep their order. What fails before sending (an
// invalid topic, a missing done) is returned at once and done is not
// called; after Close, PublishAsync returns ErrClosed.
func asyncPublish(t *testing.T, e *env) {
	pub := e.h.NewPublisher(t)
	ap, ok := pub.(relay.AsyncPublisher)
	if !ok {
		_ = pub.Close()
		t.Skipf("SKIP: the publisher (%T) does not implement relay.AsyncPublisher", pub)
	}
	defer pub.Close()
	topic := e.h.NewTopic(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)

	const calls, each = 40, 5
	all := make([]*relay.Message, 0, calls*each)
	var mu sync.Mutex
	doneCount := make([]int, calls)
	var failures []error
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for c := range calls {
		batch := make([]*relay.Message, each)
		for i := range batch {
			batch[i] = relay.NewMessage([]byte(fmt.Sprintf("async %d.%d", c, i)))
			batch[i].Key = "one-key"
		}
		all = append(all, batch...)
		wg.Add(1)
		err := ap.PublishAsync(ctx, topic, batch, func(err error) {
			mu.Lock()
			doneCount[c]++
			if err != nil {
				failures = append(failures, err)
			}
			mu.Unlock()
			wg.Done()
		})
		if err != nil {
			t.Fatalf("PublishAsync call %d: %v", c, err)
		}
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-ctx.Done():
		mu.Lock()
		missing := 0
		for _, n := range doneCount {
			if n == 0 {
				missing++
			}
		}
		mu.Unlock()
		t.Fatalf("done not called for %d of %d PublishAsync calls within 2m", missing, calls)
	}
	mu.Lock()
	for c, n := range doneCount {
		if n != 1 {
			t.Errorf("done of call %d ran %d times, want once", c, n)
		}
	}
	if len(failures) > 0 {
		t.Fatalf("%d calls failed; first: %v", len(failures), failures[0])
	}
	mu.Unlock()

	order := make([]string, 0, len(all))
	want := ids(all)
	seen := map[string]bool{}
	for len(seen) < len(all) {
		m := e.next(t, ch, fmt.Sprintf("async message %d of %d", len(seen)+1, len(all)))
		if want[m.ID] && !seen[m.ID] {
			seen[m.ID] = true
			order = append(order, m.ID)
		}
		if err := m.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	// Order across calls in flight at once is promised only where the
	// backend pipelines natively; within a call it follows Publish's rule.
	if e.caps.Ordering != relay.OrderNone {
		for c := range calls {
			var got []string
			inCall := ids(all[c*each : (c+1)*each])
			for _, id := range order {
				if inCall[id] {
					got = append(got, id)
				}
			}
			for i, m := range all[c*each : (c+1)*each] {
				if got[i] != m.ID {
					t.Fatalf("call %d: messages arrived out of order: got %v, published %v", c, got, idList(all[c*each:(c+1)*each]))
				}
			}
		}
	}
	t.Logf("%d PublishAsync calls of %d messages from one goroutine: every done once, %d messages received", calls, each, len(seen))

	called := false
	if err := ap.PublishAsync(ctx, "", []*relay.Message{relay.NewMessage([]byte("x"))}, func(error) { called = true }); !errors.Is(err, relay.ErrInvalidTopic) {
		t.Errorf("PublishAsync to topic \"\": %v, want ErrInvalidTopic", err)
	}
	if err := ap.PublishAsync(ctx, topic, []*relay.Message{relay.NewMessage([]byte("x"))}, nil); err == nil {
		t.Errorf("PublishAsync with a nil done returned nil")
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := ap.PublishAsync(ctx, topic, []*relay.Message{relay.NewMessage([]byte("x"))}, func(error) { called = true }); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("PublishAsync after Close: %v, want ErrClosed", err)
	}
	if called {
		t.Errorf("done was called for a PublishAsync that returned an error")
	}
}

func idList(msgs []*relay.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}
