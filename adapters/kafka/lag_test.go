package kafka_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// Lag is the sum over partitions of end offset minus the group's committed
// offset; acking a prefix of the deliveries lowers it by as many once the
// commit lands.
func TestLag(t *testing.T) {
	c := newCluster(t)
	topic := unique("lag")
	const n, k = 20, 7
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g"), "partitions", "3"))
	lr := relaytest.LagOf(t, sub)
	relaytest.WaitLag(t, lr, topic, 0) // no topic yet
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	pub := relaytest.OpenPublisher(t, c.url())
	publishN(t, pub, topic, n, func(i int) string { return fmt.Sprint("k", i) })
	relaytest.WaitLag(t, lr, topic, n)
	ends, err := c.admin(t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	filled := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			filled++
		}
	})
	if filled < 2 {
		t.Fatalf("records landed on %d partitions; the test needs several", filled)
	}

	ch, _ := relaytest.Subscribe(t, sub, topic)
	// Records of a partition arrive in offset order, so the first k
	// deliveries are a prefix of every partition: acking them commits k.
	var got []*relay.Message
	for len(got) < n {
		got = append(got, recv(t, ch))
	}
	relaytest.WaitLag(t, lr, topic, n) // delivered, not acked: still lag
	for _, m := range got[:k] {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	relaytest.WaitLag(t, lr, topic, n-k)
	for _, m := range got[k:] {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	relaytest.WaitLag(t, lr, topic, 0)
}

// A group without commits counts from where it would start: everything for
// start=earliest, nothing for start=latest.
func TestLagOfNewGroup(t *testing.T) {
	c := newCluster(t)
	topic := unique("lag-new")
	pub := relaytest.OpenPublisher(t, c.url("partitions", "2"))
	publishN(t, pub, topic, 5, func(i int) string { return fmt.Sprint("k", i) })
	relaytest.WaitLag(t, relaytest.LagOf(t, relaytest.OpenSubscriber(t, c.subURL(unique("g")))), topic, 5)
	relaytest.WaitLag(t, relaytest.LagOf(t, relaytest.OpenSubscriber(t, c.subURL(unique("g"), "start", "latest"))), topic, 0)
}
