package nats

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

func TestAckPending(t *testing.T) {
	for _, c := range []struct {
		reply   string
		pending uint64
		ok      bool
	}{
		{"$JS.ACK.relay_orders.billing.3.1042.977.1764590000000000000.12", 12, true},
		{"$JS.ACK.relay_orders.billing.1.1043.978.1764590000000000000.0", 0, true},
		{"$JS.ACK._.ACCHASH.relay_orders.billing.2.7.5.1764590000000000000.4.abc123", 4, true},
		{"$JS.ACK.hub.ACCHASH.relay_orders.billing.1.9.5.1764590000000000000.0", 0, true},
		{"$JS.ACK.d.h.s.c.1.2.3.4.5.6.7.8.9", 5, true},
		{"$JS.ACK.s.c.1.2.3.4.x", 0, false}, // pending not a number
		{"$JS.ACK.s.c.1.2.3.4", 0, false},   // 8 tokens
		{"_INBOX.abc.def", 0, false},
	} {
		p, ok := ackPending(c.reply)
		if p != c.pending || ok != c.ok {
			t.Errorf("ackPending(%q) = %d, %v; want %d, %v", c.reply, p, ok, c.pending, c.ok)
		}
	}
}

// fakeConsumer hands out scripted deliveries and counts the pull requests
// of each kind; the methods Receive does not use stay unimplemented.
type fakeConsumer struct {
	jetstream.Consumer
	noWait, wait int
	next         []string // reply subjects for the next pulls, one per pull
	asked        []int    // the batch of each no-wait pull
}

type fakeMsg struct {
	jetstream.Msg
	reply string
}

func (m fakeMsg) Reply() string                    { return m.reply }
func (m fakeMsg) Headers() natsgo.Header           { return nil }
func (m fakeMsg) Data() []byte                     { return []byte("x") }
func (b fakeBatch) Messages() <-chan jetstream.Msg { return b.ch }
func (b fakeBatch) Error() error                   { return nil }

type fakeBatch struct{ ch chan jetstream.Msg }

func (c *fakeConsumer) pull() (jetstream.MessageBatch, error) {
	ch := make(chan jetstream.Msg, 1)
	if len(c.next) > 0 && c.next[0] != "" {
		ch <- fakeMsg{reply: c.next[0]}
	}
	if len(c.next) > 0 {
		c.next = c.next[1:]
	}
	close(ch)
	return fakeBatch{ch}, nil
}

func (c *fakeConsumer) FetchNoWait(n int) (jetstream.MessageBatch, error) {
	c.noWait++
	c.asked = append(c.asked, n)
	return c.pull()
}

func (c *fakeConsumer) Fetch(int, ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	c.wait++
	return c.pull()
}

// TestReceiveSkipsNoWaitPullWhenDrained: after a first delivery sent with
// nothing pending, Receive goes straight to the waiting pull; after one
// with more pending, or a redelivery, it takes what is available at once
// first again.
func TestReceiveSkipsNoWaitPullWhenDrained(t *testing.T) {
	const (
		drained = "$JS.ACK.s.c.1.10.10.1764590000000000000.0"
		more    = "$JS.ACK.s.c.1.11.11.1764590000000000000.3"
		again   = "$JS.ACK.s.c.2.12.12.1764590000000000000.0"
	)
	c := &fakeConsumer{}
	r := &receiver{c: c, fetchWait: time.Second}
	steps := []struct {
		next         []string
		noWait, wait int // pulls of each kind this Receive makes
	}{
		{[]string{"", drained}, 1, 1}, // nothing at once: waits, gets a drained one
		{[]string{drained}, 0, 1},     // drained: no no-wait pull
		{[]string{more}, 0, 1},        // drained: no no-wait pull; more pending behind it
		{[]string{again}, 1, 0},       // more was pending: no-wait pull first
		{[]string{drained}, 1, 0},     // a redelivery: no-wait pull first
		{[]string{drained}, 0, 1},
	}
	for i, s := range steps {
		c.next = s.next
		nw, w := c.noWait, c.wait
		out, err := r.Receive(context.Background(), 10)
		if err != nil || len(out) != 1 {
			t.Fatalf("step %d: Receive = %d messages, %v", i, len(out), err)
		}
		if c.noWait-nw != s.noWait || c.wait-w != s.wait {
			t.Errorf("step %d: %d no-wait and %d waiting pulls, want %d and %d", i, c.noWait-nw, c.wait-w, s.noWait, s.wait)
		}
	}
}

// Receive never pulls more than the consumer's max_ack_pending: the server
// refuses such a pull (409 Exceeded MaxAckPending), which would leave
// only the one-message waiting pull. A window above max_ack_pending (the
// bridge's 1024 against the default 1000) pulls max_ack_pending.
func TestReceivePullsAtMostMaxAckPending(t *testing.T) {
	c := &fakeConsumer{}
	r := &receiver{c: c, fetchWait: time.Second, maxPull: 1000}
	c.next = []string{"$JS.ACK.s.c.1.11.11.1764590000000000000.3"}
	if _, err := r.Receive(context.Background(), 1024); err != nil {
		t.Fatal(err)
	}
	c.next = []string{"$JS.ACK.s.c.1.12.12.1764590000000000000.3"}
	if _, err := r.Receive(context.Background(), 64); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.asked) != "[1000 64]" {
		t.Fatalf("no-wait pulls for %v messages, want [1000 64]", c.asked)
	}
}
