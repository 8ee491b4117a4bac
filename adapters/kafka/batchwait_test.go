package kafka

import (
	"context"
	"errors"
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
