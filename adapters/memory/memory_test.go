package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) { drivertest.Run(t, memHarness("conformance")) }

// TestRequestReply runs the request/reply conformance checks on mem://.
func TestRequestReply(t *testing.T) { drivertest.RunRequestReply(t, memHarness("reqreply")) }

func memHarness(broker string) drivertest.Harness {
	return drivertest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			p, err := relay.OpenPublisher(context.Background(), "mem://"+broker)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			s, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: group})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		PublisherURL:   "mem://" + broker,
		SubscriberURL:  func(group string) string { return "mem://" + broker + "?group=" + group },
		HungBrokerSkip: "mem:// is in process: there is no connection that could hang",
	}
}

// max_bytes bounds a published message.
func TestMaxBytesParam(t *testing.T) {
	ctx := context.Background()
	p, err := relay.OpenPublisher(ctx, "mem://"+relay.NewID()+"?max_bytes=1000")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.Publish(ctx, "t", relay.NewMessage(make([]byte, 2000)))
	var le *relay.LimitError
	if !errors.As(err, &le) || le.Limit != 1000 {
		t.Errorf("max_bytes=1000: publishing 2000 bytes = %v, want a *relay.LimitError with limit 1000", err)
	}
}

// Lag counts queued, delayed and delivered-but-unsettled messages of the
// group, and drops as messages are acked.
func TestLag(t *testing.T) {
	broker := relay.NewID()
	pub, err := relay.OpenPublisher(context.Background(), "mem://"+broker)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "g", InFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	other, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lr := relaytest.LagOf(t, sub)

	// Retained messages go to the topic's first group, so a group not yet
	// created counts them.
	relaytest.Publish(t, pub, "retained", relay.NewMessage([]byte("r1")), relay.NewMessage([]byte("r2")))
	relaytest.WaitLag(t, lr, "retained", 2)
	relaytest.WaitLag(t, lr, "never-published", 0)

	const topic, n, k = "t", 10, 3
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	relaytest.Provision(t, other.(relay.Provisioner), topic)
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte{byte(i)})
	}
	relaytest.Publish(t, pub, topic, msgs...)
	relaytest.WaitLag(t, lr, topic, n)

	ch, cancel := relaytest.Subscribe(t, sub, topic)
	defer cancel()
	var held []*relay.Message
	for i := 0; i < k+1; i++ {
		held = append(held, relaytest.Next(t, ch, "message"))
	}
	// Delivered and unsettled messages still count.
	relaytest.WaitLag(t, lr, topic, n)
	for _, m := range held[:k] {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	relaytest.WaitLag(t, lr, topic, n-k)
	// A message waiting out a NackAfter delay still counts.
	if err := held[k].NackAfter(time.Hour); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitLag(t, lr, topic, n-k)
	// Another group's lag is its own.
	relaytest.WaitLag(t, relaytest.LagOf(t, other), topic, n)
}

// Payloads share storage on both sides of the broker, yet every message
// owns its bytes: writing to or appending to a published or a received
// payload changes no other message, no other group's copy and no
// redelivery.
func TestPayloadsAreCopies(t *testing.T) {
	broker := relay.NewID()
	pub := memory.NewPublisher(broker, memory.PublisherConfig{})
	defer pub.Close()
	subs := make([]relay.Subscriber, 2)
	for i, g := range []string{"g1", "g2"} {
		s, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: g})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		relaytest.Provision(t, s.(relay.Provisioner), "t")
		subs[i] = s
	}
	a, b := []byte("aa"), []byte("bb")
	// The first message's ID, Key and metadata are strings over a buffer
	// (as kafka:// share_payloads hands them out): the broker keeps copies.
	shared := []byte("id-1key-1mdval")
	view := func(i, j int) string { return unsafe.String(&shared[i], j-i) }
	first := &relay.Message{ID: view(0, 4), Key: view(4, 9), Metadata: relay.Metadata{view(9, 11): view(11, 14)}, Payload: a}
	relaytest.Publish(t, pub, "t", first, relay.NewMessage(b))
	a[0], b[0] = 'X', 'X'
	for i := range shared {
		shared[i] = '#'
	}

	ch, cancel := relaytest.Subscribe(t, subs[0], "t")
	defer cancel()
	m1, m2 := relaytest.Next(t, ch, "first"), relaytest.Next(t, ch, "second")
	if m1.ID != "id-1" || m1.Key != "key-1" || len(m1.Metadata) != 1 || m1.Metadata["md"] != "val" {
		t.Fatalf("first message's strings changed with the buffer they came from: %q %q %v", m1.ID, m1.Key, m1.Metadata)
	}
	m1.Payload[1] = 'Y'
	_ = append(m1.Payload, 'Z', 'Z')
	if got := string(m2.Payload); got != "bb" {
		t.Fatalf("second payload = %q after writing to the first, want %q", got, "bb")
	}
	if err := m1.Nack(); err != nil {
		t.Fatal(err)
	}
	if got := string(relaytest.Next(t, ch, "redelivery").Payload); got != "aa" {
		t.Errorf("redelivered payload = %q, want %q", got, "aa")
	}
	ch2, cancel2 := relaytest.Subscribe(t, subs[1], "t")
	defer cancel2()
	for _, want := range []string{"aa", "bb"} {
		if got := string(relaytest.Next(t, ch2, "other group").Payload); got != want {
			t.Errorf("other group's payload = %q, want %q", got, want)
		}
	}
}
