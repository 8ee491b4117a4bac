package relaytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// WindowCase is one run of WindowGrows.
type WindowCase struct {
	// N messages are published; the first Acked of them are acked as they
	// come. Acked must be large enough for the window to double from
	// Start a few times, and N-Acked at least Max.
	N, Acked int
	// Start is the window the subscription begins with, Max the largest it
	// may grow to.
	Start, Max int
	// Unordered: the broker does not keep the publish order (messages are
	// then checked by ID only).
	Unordered bool
}

// WindowGrows checks an adaptive window end to end: sub (opened with no
// inflight=) is given a backlog of c.N messages on topic, published with
// pub; the first c.Acked are acked as they come (a handler that keeps up),
// then none. The messages that reach the handler while it holds them all
// must be more than c.Start (the window grew, and the broker followed)
// and at most c.Max, each delivered once.
func WindowGrows(t *testing.T, pub relay.Publisher, sub relay.Subscriber, topic string, c WindowCase) {
	t.Helper()
	msgs := make([]*relay.Message, c.N)
	index := make(map[string]int, c.N)
	for i := range msgs {
		msgs[i] = relay.NewMessage(fmt.Appendf(nil, "m%d", i))
		index[msgs[i].ID] = i
	}
	for i := 0; i < c.N; i += 1000 {
		Publish(t, pub, topic, msgs[i:min(c.N, i+1000)]...)
	}
	ch, cancel := Subscribe(t, sub, topic)
	defer cancel()
	seen := make(map[string]bool, c.N)
	check := func(m *relay.Message, i int) {
		t.Helper()
		if _, ok := index[m.ID]; !ok || seen[m.ID] {
			t.Fatalf("message %d: ID %s (%q) unknown or delivered twice", i, m.ID, m.Payload)
		}
		seen[m.ID] = true
		if !c.Unordered && m.ID != msgs[i].ID {
			t.Fatalf("message %d: ID %s (%q), want %s", i, m.ID, m.Payload, msgs[i].ID)
		}
	}
	for i := range c.Acked {
		m := Next(t, ch, fmt.Sprintf("message %d of the backlog", i))
		check(m, i)
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	for m := Quiet(ch, time.Second); m != nil; m = Quiet(ch, time.Second) {
		check(m, c.Acked+held)
		held++
	}
	t.Logf("%d messages held at once (the window started at %d)", held, c.Start)
	if held <= c.Start || held > c.Max {
		t.Fatalf("%d messages unsettled at once after a backlog the handler kept up with; want more than %d (the starting window) and at most %d",
			held, c.Start, c.Max)
	}
}
