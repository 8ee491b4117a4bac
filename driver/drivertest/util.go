package drivertest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// env is what every check gets: the harness and the adapter's capabilities.
type env struct {
	h    *Harness
	caps relay.Capabilities
}

func (e *env) pub(t *testing.T) relay.Publisher {
	t.Helper()
	p := e.h.NewPublisher(t)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (e *env) sub(t *testing.T, group string) relay.Subscriber {
	t.Helper()
	s := e.h.NewSubscriber(t, group)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// provision creates the group of s for topic when the subscriber can, so
// that messages published next are kept for it.
func provision(t *testing.T, s relay.Subscriber, topic string) {
	t.Helper()
	p, ok := s.(relay.Provisioner)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Provision(ctx, topic); err != nil {
		t.Fatalf("Provision(%q): %v", topic, err)
	}
}

func subscribe(t *testing.T, s relay.Subscriber, topic string) (<-chan *relay.Message, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		t.Fatalf("Subscribe(%q): %v", topic, err)
	}
	t.Cleanup(cancel)
	return ch, cancel
}

func publish(t *testing.T, p relay.Publisher, topic string, msgs ...*relay.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.Publish(ctx, topic, msgs...); err != nil {
		t.Fatalf("Publish(%q, %d messages): %v", topic, len(msgs), err)
	}
}

// next waits for one message or fails the test.
func (e *env) next(t *testing.T, ch <-chan *relay.Message, what string) *relay.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return m
	case <-time.After(e.h.ReceiveTimeout):
		t.Fatalf("%s: no message within %v", what, e.h.ReceiveTimeout)
	}
	return nil
}

// none reports a message arriving within d (used only to check that
// nothing unexpected is delivered, never as a performance threshold).
func none(ch <-chan *relay.Message, d time.Duration) *relay.Message {
	select {
	case m, ok := <-ch:
		if ok {
			return m
		}
	case <-time.After(d):
	}
	return nil
}

// collect receives until every id in want was seen, acking each message.
// It returns how often each ID was delivered.
func (e *env) collect(t *testing.T, ch <-chan *relay.Message, want map[string]bool, ack bool) map[string]int {
	t.Helper()
	seen := map[string]int{}
	missing := len(want)
	last := time.Now()
	for missing > 0 {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed with %d of %d messages missing", missing, len(want))
			}
			if want[m.ID] && seen[m.ID] == 0 {
				missing--
			}
			seen[m.ID]++
			last = time.Now()
			if ack {
				if err := m.Ack(); err != nil {
					t.Fatalf("Ack: %v", err)
				}
			}
		case <-time.After(e.h.ReceiveTimeout):
			var some []string
			for id := range want {
				if seen[id] == 0 && len(some) < 3 {
					some = append(some, id)
				}
			}
			t.Fatalf("%d of %d messages missing after waiting %v since the last delivery (%s); %d received; missing include %v",
				missing, len(want), e.h.ReceiveTimeout, last.Format("15:04:05.000"), len(seen), some)
		}
	}
	return seen
}

func ids(msgs []*relay.Message) map[string]bool {
	m := make(map[string]bool, len(msgs))
	for _, x := range msgs {
		m[x.ID] = true
	}
	return m
}

func sameMetadata(a, b relay.Metadata) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func samePayload(a, b []byte) bool { return bytes.Equal(a, b) }

func expectClosed(t *testing.T, ch <-chan *relay.Message, what string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("%s: channel still open after %v", what, within)
		}
	}
}

// needRedelivery skips t when the harness declares that the backend does
// not redeliver what a subscription left unsettled.
func (e *env) needRedelivery(t *testing.T) {
	t.Helper()
	if e.h.NoRedeliveryAfterEnd != "" {
		t.Skipf("SKIP: backend %q does not redeliver after a subscription ended: %s", e.caps.Backend, e.h.NoRedeliveryAfterEnd)
	}
}
