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
