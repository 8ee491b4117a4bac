package mqtt_test

import (
	"testing"

	"github.com/go-relay/relay/driver/drivertest"
)

// TestRequestReply runs the request/reply conformance checks: the
// requester subscribes to a reply topic of its own and, on Close, removes
// the session that held it (RemoveTopic).
func TestRequestReply(t *testing.T) {
	drivertest.RunRequestReply(t, harnessFor(mqttURL(t)))
}
