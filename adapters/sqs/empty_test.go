package sqs_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/go-relay/relay"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// Rule 2 on sqs:// and sns://: a nil and an empty Payload go on the wire
// alike (SQS and SNS refuse empty bodies, so as the body "-" marked
// _relay.enc=empty, never as an absent body), and both are delivered as a
// non-nil empty Payload.
func TestNilAndEmptyPayload(t *testing.T) {
	for _, scheme := range []string{"sqs", "sns"} {
		t.Run(scheme, func(t *testing.T) {
			pub := relaytest.OpenPublisher(t, baseURL(t, scheme))
			sub := relaytest.OpenSubscriber(t, baseURL(t, scheme, groupParam(scheme)...))
			q, _ := rawClients(t, nil)
			queueOf := func(topic string) string {
				if scheme == "sns" {
					return topic + "-g"
				}
				return topic
			}
			msgs := func() []*relay.Message {
				return []*relay.Message{{ID: relay.NewID()}, {ID: relay.NewID(), Payload: []byte{}}}
			}

			// On the wire, read with the plain SDK.
			wire := name("empty-wire")
			provision(t, sub, wire)
			relaytest.Publish(t, pub, wire, msgs()...)
			url := queueURLOf(t, q, queueOf(wire))
			var seen int
			for seen < 2 {
				got := rawPeek(t, q, url)
				if len(got) == 0 {
					t.Fatalf("%d of 2 messages on the wire", seen)
				}
				for _, m := range got {
					enc := aws.ToString(m.MessageAttributes[relaysqs.AttrEncoding].StringValue)
					if aws.ToString(m.Body) != "-" || enc != relaysqs.EncEmpty {
						t.Errorf("empty payload on the wire as body %q, %s %q; want \"-\" and %q", aws.ToString(m.Body), relaysqs.AttrEncoding, enc, relaysqs.EncEmpty)
					}
				}
				seen += len(got)
			}

			// Through relay.
			rt := name("empty-rt")
			provision(t, sub, rt)
			sent := msgs()
			relaytest.Publish(t, pub, rt, sent...)
			ch := subscribe(t, sub, rt)
			want := map[string]bool{sent[0].ID: true, sent[1].ID: true}
			for range sent {
				m := relaytest.Next(t, ch, "empty payload")
				if !want[m.ID] || m.Payload == nil || len(m.Payload) != 0 {
					t.Errorf("got %s payload %#v, want one of %v with a non-nil empty payload", m.ID, m.Payload, want)
				}
				delete(want, m.ID)
				_ = m.Ack()
			}
		})
	}
}

func groupParam(scheme string) []string {
	if scheme == "sns" {
		return []string{"group=g"}
	}
	return nil
}
