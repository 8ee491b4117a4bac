package sqs_test

import (
	"fmt"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// Lag counts the messages in the subscription's queue: N after N
// publishes, N-k once k were received and acked (and the subscription that
// held others ended). Against real SQS it also counts the messages a
// subscription holds; goaws counts those twice (its
// ApproximateNumberOfMessages includes them), so that step is checked
// against AWS only.
func TestLag(t *testing.T) {
	for _, scheme := range []string{"sqs", "sns"} {
		t.Run(scheme, func(t *testing.T) {
			const n, k = 12, 4
			topic := name("lag")
			// A short visibility bounds how long goaws may keep a released
			// message invisible (see TestBinaryPayload).
			params := []string{fmt.Sprint("inflight=", k), "max_messages=1", "visibility=3s"}
			if scheme == "sns" {
				params = append(params, "group=g")
			}
			sub := relaytest.OpenSubscriber(t, baseURL(t, scheme, params...))
			lr := relaytest.LagOf(t, sub)
			relaytest.WaitLag(t, lr, topic, 0) // no queue yet
			provision(t, sub, topic)
			msgs := make([]*relay.Message, n)
			for i := range msgs {
				msgs[i] = relay.NewMessage([]byte(fmt.Sprint(i)))
			}
			relaytest.Publish(t, relaytest.OpenPublisher(t, baseURL(t, scheme)), topic, msgs...)
			relaytest.WaitLag(t, lr, topic, n)

			ch, cancel := relaytest.Subscribe(t, sub, topic)
			var held []*relay.Message
			for len(held) < k {
				held = append(held, relaytest.Next(t, ch, "message"))
			}
			if !service(t).Emulated {
				relaytest.WaitLag(t, lr, topic, n) // received, not deleted: not visible, counted
			}
			for _, m := range held {
				if err := m.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			cancel() // releases what the subscription fetched meanwhile
			for relaytest.Quiet(ch, relaytest.WaitLimit) != nil {
			}
			relaytest.WaitLag(t, lr, topic, n-k)
		})
	}
}
