package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// Bad URLs are refused before any connection, naming the parameter.
func TestURLErrors(t *testing.T) {
	for _, c := range []struct {
		url, param string
		sub        bool
	}{
		{"postgres://u@127.0.0.1:1/db?bogus=1", "bogus", false},
		{"postgres://u@127.0.0.1:1/db?group=g&bogus=1", "bogus", true},
		{"postgres://u@127.0.0.1:1/db", "group", true},
		{"postgres://u@127.0.0.1:1/db?group=g&inflight=0", "inflight", true},
		{"postgres://u@127.0.0.1:1/db?group=g&lease=10ms", "lease", true},
		{"postgres://u@127.0.0.1:1/db?group=g&poll=0s", "poll", true},
		{"postgres://u@127.0.0.1:1/db?group=g&ping_interval=1ms", "ping_interval", true},
		{"postgres://u@127.0.0.1:1/db?schema=Bad-Name", "schema", false},
		{"postgres://u@127.0.0.1:1/db?max_bytes=600000000", "max_bytes", false},
		{"postgres://u@127.0.0.1:1/db?group=a%00b", "group", true},
		// The other side's parameters are ignored, but their values are checked.
		{"postgres://u@127.0.0.1:1/db?lease=10ms", "lease", false},
		{"postgres://u@127.0.0.1:1/db?group=g&max_bytes=x", "max_bytes", true},
	} {
		var err error
		if c.sub {
			err = relay.CheckSubscriberURL(c.url)
		} else {
			err = relay.CheckURL(c.url)
		}
		var ue *relay.URLError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), `"`+c.param+`"`) {
			t.Errorf("%s: %v, want a URL error about %q", c.url, err, c.param)
		}
		// Opening reports the same, without connecting.
		if c.sub {
			_, err = relay.OpenSubscriber(context.Background(), c.url)
		} else {
			_, err = relay.OpenPublisher(context.Background(), c.url)
		}
		if !errors.As(err, &ue) {
			t.Errorf("open %s: %v, want a URL error", c.url, err)
		}
	}
	// pgx's own parameters are checked by pgx, still as URL errors.
	err := relay.CheckURL("postgres://u@127.0.0.1:1/db?sslmode=sometimes")
	var ue *relay.URLError
	if !errors.As(err, &ue) {
		t.Errorf("bad sslmode: %v, want a URL error", err)
	}
}

// A password never appears in errors.
func TestURLRedacts(t *testing.T) {
	_, err := relay.OpenPublisher(context.Background(), "postgres://user:secret@127.0.0.1:1/db?connect_timeout=1")
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("password in error: %v", err)
	}
}

// One URL with both sides' parameters and pgx's opens a publisher and a
// subscriber (project rule 3); an unknown parameter fails on both.
func TestURLBothSides(t *testing.T) {
	drivertest.URLBothSides(t, context.Background(), testenv.WithParams(pgURL(t), "group", "g", "inflight", "8",
		"lease", "10s", "poll", "500ms", "ping_interval", "5s", "max_bytes", "1024", "application_name", "relay-test",
		"connect_timeout", "3", "pool_max_conns", "4", "sslmode", "disable"))
}

func TestConfigValidate(t *testing.T) {
	err := (&postgres.SubscriberConfig{Schema: "A", InFlight: -1, Lease: 1, Poll: -1, PingInterval: time.Millisecond}).Validate()
	for _, want := range []string{"Group", "schema", "InFlight", "Lease", "Poll", "PingInterval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to mention %s", err, want)
		}
	}
	if err := (&postgres.SubscriberConfig{Group: "g"}).Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
	if err := (&postgres.PublisherConfig{MaxBytes: -1}).Validate(); err == nil {
		t.Error("negative MaxBytes accepted")
	}
}
