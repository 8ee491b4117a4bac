package redisstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// Bad URLs are refused before any connection, naming the parameter.
func TestURLErrors(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		url, param string
		sub        bool
	}{
		{"redis://127.0.0.1:1/0?bogus=1", "bogus", false},
		{"redis://127.0.0.1:1/0?group=g&bogus=1", "bogus", true},
		{"redis://127.0.0.1:1/0", "group", true},
		{"redis://127.0.0.1:1/0?group=g&start=latest", "start", true},
		{"redis://127.0.0.1:1/0?group=g&inflight=0", "inflight", true},
		{"redis://127.0.0.1:1/0?group=g&claim_idle=1ms", "claim_idle", true},
		{"redis://127.0.0.1:1/0?group=g&block=0s", "block", true},
		{"redis://127.0.0.1:1/0?group=g&consumer=relay-handback", "consumer", true},
		{"redis://127.0.0.1:1/0?maxlen=10&maxage=1h", "maxage", false},
		{"redis://127.0.0.1:1/0?max_bytes=600000000", "max_bytes", false},
		{"redis://127.0.0.1:1/0?tls_insecure=true", "tls_insecure", false},
		{"rediss://127.0.0.1:1/0?tls_ca=/no/such/file", "tls_ca", false},
		{"rediss://127.0.0.1:1/0?tls_cert=/x", "tls_cert", false},
		{"redis://127.0.0.1:1/zero", "path", false},
		// The other side's parameters are ignored, but their values are checked.
		{"redis://127.0.0.1:1/0?start=latest", "start", false},
		{"redis://127.0.0.1:1/0?claim_idle=1ms", "claim_idle", false},
		{"redis://127.0.0.1:1/0?group=g&maxlen=x", "maxlen", true},
		{"redis://127.0.0.1:1/0?group=g&maxlen=10&maxage=1h", "maxage", true},
	} {
		var err error
		if c.sub {
			_, err = relay.OpenSubscriber(ctx, c.url)
		} else {
			_, err = relay.OpenPublisher(ctx, c.url)
		}
		var ue *relay.URLError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), `"`+c.param+`"`) {
			t.Errorf("%s: %v, want a URL error about %q", c.url, err, c.param)
		}
	}
}

// A good URL reaches the server; a password never appears in errors.
func TestURLConnectsAndRedacts(t *testing.T) {
	_, err := relay.OpenPublisher(context.Background(), "redis://user:secret@127.0.0.1:1/0?dial_timeout=100ms")
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("password in error: %v", err)
	}
	u := testenv.WithParams(redisURL(t), "group", "g", "consumer", "c", "prefix", "p:", "start", "$", "inflight", "8",
		"block", "500ms", "claim_idle", "10s", "claim_every", "1s", "consumer_ttl", "1h", "dial_timeout", "2s", "read_timeout", "2s",
		"write_timeout", "2s", "pool_size", "4", "client_name", "relay-test")
	s, err := relay.OpenSubscriber(context.Background(), u)
	if err != nil {
		t.Fatalf("every subscriber option: %v", err)
	}
	_ = s.Close()
	p, err := relay.OpenPublisher(context.Background(), testenv.WithParams(redisURL(t), "prefix", "p:", "max_bytes", "1024", "maxage", "1h"))
	if err != nil {
		t.Fatalf("every publisher option: %v", err)
	}
	_ = p.Close()
}

// One URL with both sides' parameters opens a publisher and a subscriber
// (project rule 3); an unknown parameter fails on both.
func TestURLBothSides(t *testing.T) {
	drivertest.URLBothSides(t, context.Background(), testenv.WithParams(redisURL(t), "group", "g", "start", "0", "inflight", "8",
		"block", "500ms", "claim_idle", "10s", "maxlen", "1000", "max_bytes", "1024", "prefix", "p:"))
}

func TestConfigValidate(t *testing.T) {
	err := (&redisstream.SubscriberConfig{Start: "x", InFlight: -1, ClaimIdle: -1}).Validate()
	for _, want := range []string{"Group", "Start", "InFlight", "ClaimIdle"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to mention %s", err, want)
		}
	}
	if err := (&redisstream.SubscriberConfig{Group: "g"}).Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
	if err := (&redisstream.PublisherConfig{MaxLen: 1, MaxAge: 1}).Validate(); err == nil {
		t.Error("MaxLen with MaxAge accepted")
	}
}
