package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/driver/drivertest"
)

// One URL with both sides' parameters opens a publisher and a subscriber
// (project rule 3); an unknown parameter fails on both.
func TestURLBothSides(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Run("sqs", func(t *testing.T) {
		drivertest.URLBothSides(t, ctx, baseURL(t, relaysqs.SchemeSQS, "inflight=8", "wait=1", "visibility=30",
			"max_bytes=4096", "send_concurrency=2"))
	})
	t.Run("sns", func(t *testing.T) {
		drivertest.URLBothSides(t, ctx, baseURL(t, relaysqs.SchemeSNS, "group=urlsides", "inflight=8", "wait=1",
			"max_bytes=4096", "send_concurrency=2"))
	})
}

// group= is a subscriber's own requirement on sns:// and always refused on
// sqs://, which points to sns://.
func TestURLGroupRules(t *testing.T) {
	if err := relay.CheckURL("sns://?region=us-east-1&group=g"); err != nil {
		t.Errorf("sns publisher with group: %v", err)
	}
	if err := relay.CheckURL("sns://?region=us-east-1"); err != nil {
		t.Errorf("sns publisher without group: %v", err)
	}
	drivertest.URLNamesParam(t, "sns subscriber without group", relay.CheckSubscriberURL("sns://?region=us-east-1"), "group")
	drivertest.URLNamesParam(t, "sqs publisher with group", relay.CheckURL("sqs://?region=us-east-1&group=g"), "group")
	drivertest.URLNamesParam(t, "sqs subscriber with group", relay.CheckSubscriberURL("sqs://?region=us-east-1&group=g"), "group")
	if err := relay.CheckSubscriberURL("sqs://?region=us-east-1"); err != nil {
		t.Errorf("sqs subscriber: %v", err)
	}
}
