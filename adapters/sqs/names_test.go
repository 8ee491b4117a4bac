package sqs

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-relay/relay"
)

// Names within the limit stay as they are (no migration for existing
// queues); longer ones become a readable prefix plus a hash of the whole
// name, exactly limit characters, .fifo kept, stable across runs and
// versions (the golden values pin the derivation).
func TestShortenName(t *testing.T) {
	if got := ShortenName("orders-billing", MaxQueueName); got != "orders-billing" {
		t.Errorf("short name changed to %q", got)
	}
	exact := strings.Repeat("a", MaxQueueName)
	if got := ShortenName(exact, MaxQueueName); got != exact {
		t.Errorf("name of exactly %d characters changed to %q", MaxQueueName, got)
	}
	topic := "relay-test-0193b6d2-7a4e-7c1f-9d2b-3e4f5a6b7c8d"
	group := "0193b6d2-7a4e-7c1f-9d2b-000000000001"
	for _, c := range []struct{ topic, want string }{
		{topic, "relay-test-0193b6d2-7a4e-7c1f-9d2b-3e4f5a6b7c8d-0193b6d2-7a4e-7c1f-9d-696c09b1e0"},
		{topic + ".fifo", "relay-test-0193b6d2-7a4e-7c1f-9d2b-3e4f5a6b7c8d-0193b6d2-7a4e-7c-e876f1cfd1.fifo"},
	} {
		got := groupQueueName(c.topic, group)
		if len(got) > MaxQueueName || !queueNameRe.MatchString(strings.TrimSuffix(got, ".fifo")) {
			t.Errorf("%q: %q is not a valid queue name", c.topic, got)
		}
		if isFIFO(got) != isFIFO(c.topic) {
			t.Errorf("%q: FIFO suffix lost: %q", c.topic, got)
		}
		if got != c.want {
			t.Errorf("%q: derived %q, want %q (changing the derivation orphans existing queues)", c.topic, got, c.want)
		}
		if again := groupQueueName(c.topic, group); again != got {
			t.Errorf("not stable: %q then %q", got, again)
		}
	}
	if a, b := groupQueueName(topic, group), groupQueueName(topic, group[:len(group)-1]+"2"); a == b {
		t.Errorf("groups differing in their last character share queue %q", a)
	}
	long := strings.Repeat("t", 300)
	if got := snsTopicName(long); len(got) != MaxTopicName || !strings.HasPrefix(got, "ttt") {
		t.Errorf("SNS topic of 300 characters became %q (%d)", got, len(got))
	}
	if got := snsTopicName("orders"); got != "orders" {
		t.Errorf("short SNS topic changed to %q", got)
	}
}

func TestQueueParameter(t *testing.T) {
	for _, c := range []struct {
		scheme, queue string
		ok            bool
	}{
		{SchemeSNS, "", true},
		{SchemeSNS, "billing-orders", true},
		{SchemeSNS, "billing-orders.fifo", true},
		{SchemeSNS, strings.Repeat("q", 81), false},
		{SchemeSNS, "bad name", false},
		{SchemeSQS, "billing-orders", false},
	} {
		err := (Config{Queue: c.queue}).validateQueue(c.scheme)
		if (err == nil) != c.ok {
			t.Errorf("%s queue %q: %v", c.scheme, c.queue, err)
		}
	}
	d := &subDriver{endpoint: endpoint{cfg: Config{Group: "g", Queue: "mine"}}}
	if q, err := d.queueName("orders"); err != nil || q != "mine" {
		t.Errorf("queue for the first topic: %q %v", q, err)
	}
	if _, err := d.queueName("payments"); !errors.Is(err, relay.ErrInvalidTopic) {
		t.Errorf("a second topic on an explicit queue: %v, want ErrInvalidTopic", err)
	}
	d2 := &subDriver{endpoint: endpoint{cfg: Config{Group: "g", Queue: "mine"}}}
	if _, err := d2.queueName("orders.fifo"); !errors.Is(err, relay.ErrInvalidTopic) {
		t.Errorf("a standard queue for a FIFO topic: %v, want ErrInvalidTopic", err)
	}
}
