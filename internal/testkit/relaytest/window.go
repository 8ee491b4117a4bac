package relaytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// WindowGrows checks an adaptive window end to end: sub (opened with no
// inflight=) is given a backlog of n messages on topic, published with
// pub; the first acked of them are acked as they come (a handler that
// keeps up), then none. The messages that reach the handler while it
// holds them all must be more than start (the window the subscription
// began with: it grew, and the broker followed) and at most max, in
// publish order. acked must be large enough for the window to double
// from start (a few windows' worth), and n-acked at least max.
func WindowGrows(t *testing.T, pub relay.Publisher, sub relay.Subscriber, topic string, n, acked, start, max int) {
	t.Helper()
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage(fmt.Appendf(nil, "m%d", i))
	}
	for i := 0; i < n; i += 1000 {
		Publish(t, pub, topic, msgs[i:min(n, i+1000)]...)
	}
	ch, cancel := Subscribe(t, sub, topic)
	defer cancel()
	for i := range acked {
		m := Next(t, ch, fmt.Sprintf("message %d of the backlog", i))
		if m.ID != msgs[i].ID {
			t.Fatalf("message %d: ID %s (%q), want %s", i, m.ID, m.Payload, msgs[i].ID)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	for {
		m := Quiet(ch, time.Second)
		if m == nil {
			break
		}
		if want := msgs[acked+held]; m.ID != want.ID {
			t.Fatalf("held message %d: ID %s (%q), want %s", held, m.ID, m.Payload, want.ID)
		}
		held++
	}
	t.Logf("%d messages held at once (window started at %d)", held, start)
	if held <= start || held > max {
		t.Fatalf("%d messages unsettled at once after a backlog the handler kept up with; want more than %d (the starting window) and at most %d",
			held, start, max)
	}
}
