package amqp_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// One URL with both sides' parameters opens a publisher and a subscriber
// (project rule 3); an unknown parameter fails on both.
func TestURLBothSides(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	drivertest.URLBothSides(t, ctx, testenv.WithParams(brokerURL(t), "group", "urlsides", "inflight", "8", "queue_type", "classic",
		"confirm", "true", "publish_channels", "1", "max_bytes", "4096"))
}

// A URL is checked for both sides whichever side opens it; only the group
// is a subscriber's own requirement.
func TestURLOtherSideChecked(t *testing.T) {
	const base = "amqp://guest:guest@127.0.0.1:1/"
	drivertest.URLNamesParam(t, "publisher inflight=70000", relay.CheckURL(base+"?inflight=70000"), "inflight")
	drivertest.URLNamesParam(t, "publisher requeue_on_nack=false", relay.CheckURL(base+"?requeue_on_nack=false"), "requeue_on_nack")
	drivertest.URLNamesParam(t, "subscriber publish_channels=0", relay.CheckSubscriberURL(base+"?group=g&publish_channels=0"), "publish_channels")
	drivertest.URLNamesParam(t, "subscriber without group", relay.CheckSubscriberURL(base), "group")
	if err := relay.CheckURL(base); err != nil {
		t.Errorf("publisher needs no group: %v", err)
	}
}
