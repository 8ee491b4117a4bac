package sqs_test

import (
	"testing"

	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/driver/drivertest"
)

// TestRequestReply runs the request/reply conformance checks on sqs://
// (goaws): the requester's reply topic is a queue of its own, deleted on
// Close.
func TestRequestReply(t *testing.T) {
	base := baseURL(t, relaysqs.SchemeSQS, conformanceVisibility)
	drivertest.RunRequestReply(t, drivertest.Harness{
		PublisherURL:  base,
		SubscriberURL: func(string) string { return base },
	})
}
