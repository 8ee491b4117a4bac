package relaytest_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A message published after Provision reaches the subscriber in order,
// and Quiet then sees nothing more.
func TestRoundTrip(t *testing.T) {
	broker, topic := relaytest.Unique("broker"), relaytest.Unique("topic")
	pub := memory.NewPublisher(broker, memory.PublisherConfig{})
	t.Cleanup(func() { _ = pub.Close() })
	sub, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })

	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	relaytest.Publish(t, pub, topic, relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b")))
	ch, cancel := relaytest.Subscribe(t, sub, topic)
	for _, want := range []string{"a", "b"} {
		m := relaytest.Next(t, ch, "message "+want)
		if got := string(m.Payload); got != want {
			t.Fatalf("body %q, want %q", got, want)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if m := relaytest.Quiet(ch, 0); m != nil {
		t.Fatalf("unexpected message %q", m.Payload)
	}
	cancel()
	for range ch { // the channel closes once the subscription has ended
	}
	if m := relaytest.Quiet(ch, 0); m != nil {
		t.Fatal("Quiet on a closed channel returned a message")
	}
}

func TestUnique(t *testing.T) {
	a, b := relaytest.Unique("p"), relaytest.Unique("p")
	if a == b || !strings.HasPrefix(a, "p-") {
		t.Fatalf("Unique gave %q and %q", a, b)
	}
}

// fatalTB records the first Fatalf and ends the goroutine as t.Fatalf does.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// Next on a closed channel fails the test naming what it waited for.
func TestNextClosed(t *testing.T) {
	ch := make(chan *relay.Message)
	close(ch)
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		relaytest.Next(f, ch, "the reply")
	}()
	<-done
	if want := "the reply: channel closed"; f.msg != want {
		t.Fatalf("Fatalf(%q), want %q", f.msg, want)
	}
}
