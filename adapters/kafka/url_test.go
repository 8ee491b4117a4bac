package kafka_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/kafka"
	"github.com/go-relay/relay/driver/drivertest"
)

// One URL with both sides' parameters opens a publisher and a subscriber
// (project rule 3); an unknown parameter fails on both.
func TestURLBothSides(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	drivertest.URLBothSides(t, ctx, c.subURL("urlsides", "acks", "leader", "linger", "5ms", "compression", "none",
		"max_bytes", "4096", "inflight", "8", "start", "latest"))
}

// A publisher needs no group; a subscriber does.
func TestURLGroupOnlyForSubscribers(t *testing.T) {
	if err := relay.CheckURL("kafka://127.0.0.1:1?inflight=3"); err != nil {
		t.Errorf("publisher URL: %v", err)
	}
	drivertest.URLNamesParam(t, "subscriber without group", relay.CheckSubscriberURL("kafka://127.0.0.1:1?acks=all"), "group")
}

// TestURLSizesTakeUnits: fetch_max_bytes and max_bytes read binary units
// as inflight_bytes does.
func TestURLSizesTakeUnits(t *testing.T) {
	u, _ := url.Parse("kafka://127.0.0.1:9092?group=g&fetch_max_bytes=8MiB&max_bytes=512KiB")
	sc, err := kafka.ParseSubscriberURL(u)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := kafka.ParsePublisherURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if sc.FetchMaxBytes != 8<<20 || pc.MaxMessageBytes != 512<<10 {
		t.Fatalf("fetch_max_bytes %d, max_bytes %d; want %d and %d", sc.FetchMaxBytes, pc.MaxMessageBytes, 8<<20, 512<<10)
	}
}
