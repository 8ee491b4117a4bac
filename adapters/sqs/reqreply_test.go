package sqs_test

import (
	"context"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/adaptertest"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
)

// TestRequestReply runs the request/reply conformance checks on sqs://
// (goaws): the requester's reply topic is a queue of its own, deleted on
// Close.
func TestRequestReply(t *testing.T) {
	base := baseURL(t, relaysqs.SchemeSQS, conformanceVisibility)
	adaptertest.RunRequestReply(t, adaptertest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			p, err := relay.OpenPublisher(context.Background(), base)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewSubscriber: func(t testing.TB, _ string) relay.Subscriber {
			s, err := relay.OpenSubscriber(context.Background(), base)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}
