package nats_test

import (
	"testing"

	"github.com/go-relay/relay/driver/drivertest"
)

// TestRequestReply runs the request/reply conformance checks: the
// requester uses a reply topic (a stream) of its own and removes it on
// Close.
func TestRequestReply(t *testing.T) {
	drivertest.RunRequestReply(t, harnessFor(t, natsURL(t)))
}
