package nats

import (
	"testing"
)

func TestAckInfo(t *testing.T) {
	for _, c := range []struct {
		reply          string
		delivered, seq uint64
		ok             bool
	}{
		// nats-server 2.9 (v1, 9 tokens): stream, consumer, delivered, stream seq, consumer seq, time, pending.
		{"$JS.ACK.relay_orders.billing.3.1042.977.1764590000000000000.12", 3, 1042, true},
		// v2: domain and account hash first, and a random token at the end (12 tokens) ...
		{"$JS.ACK._.ACCHASH.relay_orders.billing.2.7.5.1764590000000000000.0.abc123", 2, 7, true},
		// ... or without it (11 tokens).
		{"$JS.ACK.hub.ACCHASH.relay_orders.billing.1.18446744073709551615.5.1764590000000000000.0", 1, 18446744073709551615, true},
		{"", 0, 0, false},
		{"_INBOX.abc.def", 0, 0, false},
		{"$JS.ACK.s.c.1.2.3.4", 0, 0, false},              // 8 tokens
		{"$JS.ACK.d.h.s.c.1.2.3.4.5.6.7.8.9", 1, 2, true}, // more tokens at the end are allowed
		{"$JS.ACK.s.c.x.2.3.4.5", 0, 0, false},            // delivered not a number
		{"$JS.ACK.s.c.1..3.4.5", 0, 0, false},             // empty stream sequence
		{"$JS.ACK.d.h.s.c.1.2.3.4", 0, 0, false},          // 10 tokens
		{"$JS.ACK.s.c.1.99999999999999999999.3.4.5", 0, 0, false},
	} {
		d, seq, ok := ackInfo(c.reply)
		if d != c.delivered || seq != c.seq || ok != c.ok {
			t.Errorf("ackInfo(%q) = %d, %d, %v; want %d, %d, %v", c.reply, d, seq, ok, c.delivered, c.seq, c.ok)
		}
	}
}
