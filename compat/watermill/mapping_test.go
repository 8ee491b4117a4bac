package watermill_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/go-relay/relay"
	wm "github.com/go-relay/relay/compat/watermill"
)

func memURL(t *testing.T) string { return "mem://wm-" + relay.NewID()[24:] }

func openMem(t *testing.T, base, group string) (relay.Publisher, relay.Subscriber) {
	t.Helper()
	p, err := relay.OpenPublisher(context.Background(), withQuery(t, base, "group", group))
	if err != nil {
		t.Fatal(err)
	}
	s, err := relay.OpenSubscriber(context.Background(), withQuery(t, base, "group", group))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(); _ = s.Close() })
	return p, s
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10s")
	}
	var zero T
	return zero
}

// A Watermill message published through relay arrives at a relay
// subscriber with UUID as ID, the key entry as Key (and not as metadata),
// the rest of the metadata and the payload; back through the Watermill
// Subscriber the key entry reappears.
func TestWatermillToRelayMapping(t *testing.T) {
	base := memURL(t)
	rp, rs := openMem(t, base, "g")
	_, rs2 := openMem(t, base, "g2")
	ctx := context.Background()
	for _, s := range []relay.Subscriber{rs, rs2} {
		if err := s.(relay.Provisioner).Provision(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
	}
	pub := wm.NewPublisher(rp, wm.Options{})
	m := message.NewMessage("3f2b8e1c-0000-4000-8000-000000000001", []byte{0, 1, 2, 255})
	m.Metadata.Set("relay_key", "customer-7")
	m.Metadata.Set("trace", "t-1")
	noID := message.NewMessage("", []byte("no uuid"))
	if err := pub.Publish("orders", m, noID); err != nil {
		t.Fatal(err)
	}
	if noID.UUID == "" {
		t.Fatal("a message published without UUID did not get the relay ID written back")
	}

	ch, err := rs.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	got := recv(t, ch)
	if got.ID != m.UUID || got.Key != "customer-7" || string(got.Payload) != string(m.Payload) {
		t.Errorf("relay message ID %q Key %q payload %v; want %q, customer-7, %v", got.ID, got.Key, got.Payload, m.UUID, m.Payload)
	}
	if len(got.Metadata) != 1 || got.Metadata["trace"] != "t-1" {
		t.Errorf("relay metadata %v, want only trace=t-1 (the key entry becomes Key)", got.Metadata)
	}
	_ = got.Ack()
	if second := recv(t, ch); second.ID != noID.UUID {
		t.Errorf("second message ID %q, want the UUID written back, %q", second.ID, noID.UUID)
	}

	sub := wm.NewSubscriber(rs2, wm.Options{})
	wch, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	back := recv(t, wch)
	if back.UUID != m.UUID || back.Metadata.Get("relay_key") != "customer-7" || back.Metadata.Get("trace") != "t-1" {
		t.Errorf("Watermill message UUID %q metadata %v, want %q with relay_key and trace", back.UUID, back.Metadata, m.UUID)
	}
	rm := wm.RelayMessage(back)
	if rm == nil || rm.Topic() != "orders" || rm.Key != "customer-7" || wm.Attempt(back) != 1 {
		t.Fatalf("RelayMessage = %+v, want the delivered relay message of topic orders, attempt 1", rm)
	}
	back.Ack()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
}

// A Watermill Nack is relay's Nack: the message comes back with Attempt 2.
// NackAfter delays the next delivery (attempt 3) by at least the delay.
// The next message waits until the current one is settled.
func TestNackAttemptAndNackAfter(t *testing.T) {
	// inflight=1: relay reads nothing ahead, so a nacked message is
	// redelivered before the next one (with a larger window, the
	// messages read ahead come first).
	base := memURL(t)
	rp, rs := openMem(t, base+"?inflight=1", "g")
	pub, sub := wm.NewPublisher(rp, wm.Options{}), wm.NewSubscriber(rs, wm.Options{})
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	a, b := message.NewMessage("a", []byte("a")), message.NewMessage("b", []byte("b"))
	if err := pub.Publish("jobs", a, b); err != nil {
		t.Fatal(err)
	}
	first := recv(t, ch)
	if first.UUID != "a" || wm.Attempt(first) != 1 {
		t.Fatalf("first %q attempt %d, want a, 1", first.UUID, wm.Attempt(first))
	}
	select {
	case m := <-ch:
		t.Fatalf("message %q delivered before the first one was settled", m.UUID)
	case <-time.After(200 * time.Millisecond):
	}
	first.Nack()
	second := recv(t, ch)
	if second.UUID != "a" || wm.Attempt(second) != 2 {
		t.Fatalf("after Nack: %q attempt %d, want a, 2", second.UUID, wm.Attempt(second))
	}
	const delay = 300 * time.Millisecond
	start := time.Now()
	if err := wm.NackAfter(second, delay); err != nil {
		t.Fatal(err)
	}
	if second.Ack() {
		t.Error("Ack after NackAfter returned true: the Watermill message was not nacked")
	}
	// mem:// keeps publish order, and a redelivered message goes back to
	// its place: b is delivered while a waits out its delay.
	if m := recv(t, ch); m.UUID != "b" {
		t.Fatalf("got %q, want b while a waits", m.UUID)
	} else {
		m.Ack()
	}
	third := recv(t, ch)
	if third.UUID != "a" || wm.Attempt(third) != 3 || time.Since(start) < delay {
		t.Fatalf("after NackAfter(%v): %q attempt %d after %v, want a, 3, not earlier", delay, third.UUID, wm.Attempt(third), time.Since(start))
	}
	third.Ack()

	if err := wm.NackAfter(message.NewMessage("x", nil), time.Second); !errors.Is(err, wm.ErrNotRelayMessage) {
		t.Errorf("NackAfter on a message of another origin = %v, want ErrNotRelayMessage", err)
	}
}

// Consecutive messages with one context go in one relay call; a message
// whose context is done fails the call it is in, and nothing after it is
// sent.
func TestPublishPerContext(t *testing.T) {
	base := memURL(t)
	rp, rs := openMem(t, base, "g")
	pub := wm.NewPublisher(rp, wm.Options{})
	done, cancel := context.WithCancel(context.Background())
	cancel()
	ms := []*message.Message{message.NewMessage("1", nil), message.NewMessage("2", nil), message.NewMessage("3", nil), message.NewMessage("4", nil)}
	ms[2].SetContext(done)
	err := pub.Publish("t", ms...)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish with a cancelled message context = %v, want context.Canceled", err)
	}
	ch, err := rs.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		m := recv(t, ch)
		got = append(got, m.ID)
		_ = m.Ack()
	}
	select {
	case m := <-ch:
		t.Fatalf("message %q published after the failed call", m.ID)
	case <-time.After(200 * time.Millisecond):
	}
	if got[0] != "1" || got[1] != "2" {
		t.Errorf("delivered %v, want [1 2]", got)
	}
}

// Close closes every channel, ends the relay subscriber, and Subscribe
// after Close fails with relay.ErrClosed.
func TestSubscriberClose(t *testing.T) {
	_, rs := openMem(t, memURL(t), "g")
	sub := wm.NewSubscriber(rs, wm.Options{})
	ch1, _ := sub.Subscribe(context.Background(), "a")
	ch2, _ := sub.Subscribe(context.Background(), "b")
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan *message.Message{ch1, ch2} {
		select {
		case _, ok := <-ch:
			if ok {
				t.Fatal("message on a closed subscriber's channel")
			}
		default:
			t.Fatal("channel still open after Close returned")
		}
	}
	if _, err := sub.Subscribe(context.Background(), "a"); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := rs.Subscribe(context.Background(), "a"); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("the relay subscriber was not closed: Subscribe = %v", err)
	}
}

// A relay message published through a Watermill backend reaches Watermill
// with ID as UUID and Key in the key entry, and comes back to relay whole.
func TestBackendMapping(t *testing.T) {
	gc := gochannel.NewGoChannel(gochannel.Config{}, nil)
	defer gc.Close()
	raw, err := gc.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	rp := wm.NewBackendPublisher(client{gc}, wm.BackendConfig{KeyMetadata: "partition"})
	rs := wm.NewBackendSubscriber(client{gc}, wm.BackendConfig{KeyMetadata: "partition"})
	defer rs.Close()
	ch, err := rs.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rs.(relay.Provisioner); ok {
		t.Error("a backend over a subscriber without SubscribeInitialize claims relay.Provisioner")
	}
	m := &relay.Message{ID: "id-1", Key: "k", Metadata: relay.Metadata{"h": "v"}, Payload: []byte("p")}
	if err := rp.Publish(context.Background(), "t", m); err != nil {
		t.Fatal(err)
	}
	w := recv(t, raw)
	if w.UUID != "id-1" || w.Metadata.Get("partition") != "k" || w.Metadata.Get("h") != "v" || len(w.Metadata) != 2 {
		t.Errorf("Watermill side: UUID %q metadata %v, want id-1 with partition=k and h=v", w.UUID, w.Metadata)
	}
	w.Ack()
	got := recv(t, ch)
	if got.ID != "id-1" || got.Key != "k" || len(got.Metadata) != 1 || got.Metadata["h"] != "v" || string(got.Payload) != "p" || got.Attempt() != 1 {
		t.Errorf("relay side: %+v attempt %d", got, got.Attempt())
	}
	_ = got.Ack()
	if caps := rp.(relay.CapabilityReporter).Capabilities(); caps.Backend != "watermill" || caps.NativeDelay || caps.AttemptFromBroker {
		t.Errorf("capabilities %+v: want Backend watermill, no native delay, no broker attempts", caps)
	}
	if err := rp.Close(); err != nil {
		t.Fatal(err)
	}
}
