package watermill_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/go-relay/relay"
	wm "github.com/go-relay/relay/compat/watermill"
)

// feed is a Watermill subscriber whose one subscription delivers what the
// test sends on ch; the channel closes when the subscription's ctx ends.
type feed struct {
	ch      chan *message.Message
	stopped chan struct{}
}

func newFeed() *feed { return &feed{ch: make(chan *message.Message), stopped: make(chan struct{})} }

func (f *feed) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		defer close(f.stopped)
		for {
			select {
			case m := <-f.ch:
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (f *feed) Close() error { return nil }

// Under relay, a message left unsettled when the relay subscription ends
// is Nacked at Watermill, so that Watermill redelivers it; Ack and Nack
// reach Watermill as Ack and Nack.
func TestBackendSettlesAtWatermill(t *testing.T) {
	f := newFeed()
	rs := wm.NewBackendSubscriber(f, wm.BackendConfig{})
	defer rs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := rs.Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	acked, nacked, held := message.NewMessage("a", nil), message.NewMessage("n", nil), message.NewMessage("h", nil)
	for _, w := range []*message.Message{acked, nacked, held} {
		f.ch <- w
		m := recv(t, ch)
		if m.ID != w.UUID {
			t.Fatalf("got %q, want %q", m.ID, w.UUID)
		}
		switch w {
		case acked:
			_ = m.Ack()
		case nacked:
			_ = m.Nack()
		}
	}
	for name, c := range map[string]<-chan struct{}{"Ack": acked.Acked(), "Nack": nacked.Nacked()} {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Errorf("relay's %s did not reach Watermill", name)
		}
	}
	cancel()
	for range ch {
	}
	select {
	case <-held.Nacked():
	default:
		t.Error("the unsettled message was not Nacked at Watermill when the relay subscription ended")
	}
	<-f.stopped
}

// An Ack made before Close reaches relay: the message is not delivered
// again to the group.
func TestAckBeforeCloseCounts(t *testing.T) {
	base := memURL(t)
	rp, _ := openMem(t, base, "g")
	const n = 30
	var msgs []*relay.Message
	for i := 0; i < n; i++ {
		msgs = append(msgs, relay.NewMessage([]byte(fmt.Sprint(i))))
	}
	if err := rp.Publish(context.Background(), "t", msgs...); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		s, err := relay.OpenSubscriber(context.Background(), base+"?group=g&inflight=1")
		if err != nil {
			t.Fatal(err)
		}
		sub := wm.NewSubscriber(s, wm.Options{})
		ch, err := sub.Subscribe(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		m := recv(t, ch)
		if m.UUID != msgs[i].ID {
			t.Fatalf("subscriber %d got %q, want %q: an acked message came back", i, m.UUID, msgs[i].ID)
		}
		m.Ack()
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
