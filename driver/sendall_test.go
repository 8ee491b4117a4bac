package driver

import (
	"context"
	"testing"

	"github.com/go-relay/relay"
)

// wholePub implements WholeSender: it must get every message of a Publish
// call at once, after validation, and never SendBatch.
type wholePub struct {
	fakePub
	calls [][]string
}

func (w *wholePub) SendAll(_ context.Context, _ string, msgs []*relay.Message) error {
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	w.calls = append(w.calls, ids)
	return nil
}

func TestWholeSenderGetsTheWholeCall(t *testing.T) {
	w := &wholePub{fakePub: fakePub{maxB: 2}}
	p := NewPublisher(w, 0)
	defer p.Close()
	if err := p.Publish(context.Background(), "t", msgs(5)...); err != nil {
		t.Fatal(err)
	}
	if len(w.calls) != 1 || len(w.calls[0]) != 5 || len(w.batches) != 0 {
		t.Fatalf("SendAll calls %v, SendBatch calls %v; want one SendAll of 5", w.calls, w.batches)
	}
	big := relay.NewMessage(make([]byte, 200)) // over the fake's 100-byte limit
	if err := p.Publish(context.Background(), "t", relay.NewMessage(nil), big); err == nil || len(w.calls) != 1 {
		t.Fatalf("oversize batch: err %v, SendAll calls %d; want a limit error before sending", err, len(w.calls))
	}
}
