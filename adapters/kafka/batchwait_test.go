package kafka

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/go-relay/relay"
)

// A batch whose ctx has already ended reports it once, through onDone,
// without racing on its ctx watch (the watch fires as AfterFunc
// registers it; the black-hole fault scenario found the race).
func TestBatchWaitEndedCtx(t *testing.T) {
	for range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done := make(chan error, 2)
		b := newBatchWait(ctx, []*relay.Message{relay.NewMessage([]byte("x"))}, func(err error) { done <- err })
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("onDone(%v), want an error wrapping context.Canceled", err)
		}
		b.finish(0, nil) // a late promise changes nothing
		select {
		case err := <-done:
			t.Fatalf("onDone ran twice (second: %v)", err)
		default:
		}
	}
}

// One promise serves every record of a batch: a failure is reported for
// the message whose record failed, whatever order the promises come in.
func TestBatchWaitPromiseFindsItsRecord(t *testing.T) {
	msgs := []*relay.Message{relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b")), relay.NewMessage([]byte("c"))}
	done := make(chan error, 1)
	b := newBatchWait(context.Background(), msgs, func(err error) { done <- err })
	boom := errors.New("boom")
	b.promise(&b.recs[2], nil)
	b.promise(&b.recs[1], boom)
	select {
	case err := <-done:
		t.Fatalf("onDone(%v) before the last promise", err)
	default:
	}
	b.promise(&b.recs[0], nil)
	var pe *relay.PublishError
	if err := <-done; !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0].ID != msgs[1].ID || !errors.Is(pe.Failed[0].Err, boom) {
		t.Fatalf("outcome %v, want a PublishError naming only %s with boom", err, msgs[1].ID)
	}
}

// Promises run concurrently (franz-go finishes partitions on different
// goroutines) and may race the ctx's end: onDone still runs exactly once,
// and every message it names failed with its own error or was not
// confirmed before the end. Run with -race.
func TestBatchWaitConcurrentPromises(t *testing.T) {
	boom := errors.New("boom")
	for round := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		msgs := make([]*relay.Message, 64)
		for i := range msgs {
			msgs[i] = relay.NewMessage([]byte{byte(i)})
		}
		calls := make(chan error, 2)
		b := newBatchWait(ctx, msgs, func(err error) { calls <- err })
		index := map[string]int{}
		for i, m := range msgs {
			index[m.ID] = i
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := g; i < len(msgs); i += 4 {
					var err error
					if i%2 == 1 {
						err = boom
					}
					b.promise(&b.recs[i], err)
				}
			})
		}
		cancelled := round%2 == 1
		if cancelled {
			cancel()
		}
		wg.Wait()
		cancel()
		err := <-calls
		select {
		case again := <-calls:
			t.Fatalf("onDone ran twice (%v, then %v)", err, again)
		default:
		}
		var pe *relay.PublishError
		if !errors.As(err, &pe) {
			if cancelled && errors.Is(err, context.Canceled) {
				continue // ended before any promise: all unconfirmed alike
			}
			t.Fatalf("round %d: outcome %v, want a PublishError", round, err)
		}
		odd := 0
		for _, f := range pe.Failed {
			i := index[f.ID]
			switch {
			case i%2 == 1 && errors.Is(f.Err, boom):
				odd++
			case cancelled && errors.Is(f.Err, context.Canceled):
			default:
				t.Fatalf("round %d: message %d reported as failed with %v", round, i, f.Err)
			}
		}
		if !cancelled && (odd != len(msgs)/2 || len(pe.Failed) != odd) {
			t.Fatalf("round %d: %d failures (%d with boom), want the %d odd messages", round, len(pe.Failed), odd, len(msgs)/2)
		}
	}
}
