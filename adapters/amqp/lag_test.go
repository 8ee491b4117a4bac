package amqp_test

import (
	"fmt"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// Lag is the ready count of the group's queue plus the deliveries this
// subscriber holds unacked: a message leaves the lag only when acked.
func TestLag(t *testing.T) {
	c := newCleaner(t)
	topic := unique("lag")
	const n, k = 10, 3
	sub := openSub(t, c, unique("g"), "inflight", fmt.Sprint(k))
	lr := relaytest.LagOf(t, sub)
	relaytest.WaitLag(t, lr, topic, 0) // no queue yet
	relaytest.Provision(t, sub, topic)
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprint(i)))
	}
	relaytest.Publish(t, openPub(t), topic, msgs...)
	relaytest.WaitLag(t, lr, topic, n)

	ch, cancel := relaytest.Subscribe(t, sub, topic)
	var held []*relay.Message
	for i := 0; i < k; i++ {
		held = append(held, relaytest.Next(t, ch, "message"))
	}
	// The prefetch (inflight=k) is full: n-k ready and k held unacked.
	relaytest.WaitLag(t, lr, topic, n)
	for _, m := range held {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	// The broker delivers the next k at once: n-2k ready, k held.
	relaytest.WaitLag(t, lr, topic, n-k)
	// Ending the subscription requeues those k.
	cancel()
	for relaytest.Quiet(ch, relaytest.WaitLimit) != nil {
	}
	relaytest.WaitLag(t, lr, topic, n-k)
}
