package sqs_test

import (
	"testing"

	"github.com/go-relay/relay/adapters/adaptertest"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
)

// TestRequestReply runs the request/reply conformance checks on sqs://
// (goaws): the requester's reply topic is a queue of its own, deleted on
// Close.
func TestRequestReply(t *testing.T) {
	base := baseURL(t, relaysqs.SchemeSQS, conformanceVisibility)
	adaptertest.RunRequestReply(t, adaptertest.Harness{
		PublisherURL:  base,
		SubscriberURL: func(string) string { return base },
	})
}
