package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/urlopt/urlopttest"
)

// One URL with both sides' parameters opens a publisher and a subscriber
// (project rule 3); an unknown parameter fails on both.
func TestURLBothSides(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	urlopttest.BothSides(t, ctx, c.subURL("urlsides", "acks", "leader", "linger", "5ms", "compression", "none",
		"max_bytes", "4096", "inflight", "8", "start", "latest"))
}

// A publisher needs no group; a subscriber does.
func TestURLGroupOnlyForSubscribers(t *testing.T) {
	if err := relay.CheckURL("kafka://127.0.0.1:1?inflight=3"); err != nil {
		t.Errorf("publisher URL: %v", err)
	}
	urlopttest.NamesParam(t, "subscriber without group", relay.CheckSubscriberURL("kafka://127.0.0.1:1?acks=all"), "group")
}
