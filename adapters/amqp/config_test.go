package amqp_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
)

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestParseURLDefaults(t *testing.T) {
	cfg, err := amqp.ParseURL(mustURL(t, "amqp://u:p@h:5672/vh?group=g"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.URL != "amqp://u:p@h:5672/vh" {
		t.Errorf("URL %q: the query must be stripped", cfg.URL)
	}
	if cfg.Group != "g" || cfg.ExchangeKind != "fanout" || cfg.QueueType != "classic" || cfg.InFlight != 0 ||
		!cfg.Confirm || !cfg.Mandatory || !cfg.RequeueOnNack || !cfg.NativeDelay || cfg.PublishChannels != 2 ||
		cfg.MaxBytes != 16<<20 || cfg.Heartbeat != 10*time.Second || cfg.BindingKeys != nil {
		t.Errorf("defaults: %+v", cfg)
	}
	if err := cfg.ValidateSubscriber(); err != nil {
		t.Errorf("ValidateSubscriber: %v", err)
	}
}

func TestParseURLEveryOption(t *testing.T) {
	raw := "amqps://u:p@h/vh?group=g&exchange_kind=topic&exchange_prefix=ex.&queue_prefix=q.&binding_key=a.*&binding_key=b.%23" +
		"&queue_type=quorum&inflight=10&nack_mode=republish&requeue_on_nack=false&dead_letter_exchange=dlx&delivery_limit=5" +
		"&native_delay=false&confirm=true&mandatory=false&publish_channels=3&max_bytes=1000&heartbeat=5s&connect_timeout=2s" +
		"&reconnect_min=50ms&reconnect_max=1s&connection_name=svc&tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem" +
		"&tls_server_name=broker&tls_insecure=true"
	cfg, err := amqp.ParseURL(mustURL(t, raw))
	if err != nil {
		t.Fatal(err)
	}
	want := amqp.Config{
		URL: "amqps://u:p@h/vh", Group: "g", ExchangeKind: "topic", ExchangePrefix: "ex.", QueuePrefix: "q.",
		BindingKeys: []string{"a.*", "b.#"}, QueueType: "quorum", InFlight: 10, NackMode: "republish",
		RequeueOnNack: false, DeadLetterExchange: "dlx", DeliveryLimit: 5, NativeDelay: false, Confirm: true,
		Mandatory: false, PublishChannels: 3, MaxBytes: 1000, Heartbeat: 5 * time.Second, ConnectTimeout: 2 * time.Second,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second, ConnectionName: "svc",
		TLSCAFile: "/ca.pem", TLSCertFile: "/c.pem", TLSKeyFile: "/k.pem", TLSServerName: "broker", TLSInsecureSkipVerify: true,
	}
	if cfg.URL != want.URL || cfg.Group != want.Group || cfg.ExchangeKind != want.ExchangeKind ||
		cfg.ExchangePrefix != want.ExchangePrefix || cfg.QueuePrefix != want.QueuePrefix ||
		strings.Join(cfg.BindingKeys, ",") != strings.Join(want.BindingKeys, ",") || cfg.QueueType != want.QueueType ||
		cfg.InFlight != want.InFlight || cfg.NackMode != want.NackMode || cfg.RequeueOnNack != want.RequeueOnNack ||
		cfg.DeadLetterExchange != want.DeadLetterExchange || cfg.DeliveryLimit != want.DeliveryLimit ||
		cfg.NativeDelay != want.NativeDelay || cfg.Confirm != want.Confirm || cfg.Mandatory != want.Mandatory ||
		cfg.PublishChannels != want.PublishChannels || cfg.MaxBytes != want.MaxBytes || cfg.Heartbeat != want.Heartbeat ||
		cfg.ConnectTimeout != want.ConnectTimeout || cfg.ReconnectMin != want.ReconnectMin ||
		cfg.ReconnectMax != want.ReconnectMax || cfg.ConnectionName != want.ConnectionName ||
		cfg.TLSCAFile != want.TLSCAFile || cfg.TLSCertFile != want.TLSCertFile || cfg.TLSKeyFile != want.TLSKeyFile ||
		cfg.TLSServerName != want.TLSServerName || cfg.TLSInsecureSkipVerify != want.TLSInsecureSkipVerify {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
	if err := cfg.ValidateSubscriber(); err != nil {
		t.Errorf("ValidateSubscriber: %v", err)
	}
}

func TestParseURLRejects(t *testing.T) {
	for _, tc := range []struct{ query, param string }{
		{"no_such=1", "no_such"},
		{"exchange_kind=headers", "exchange_kind"},
		{"queue_type=stream", "queue_type"},
		{"inflight=0", "inflight"},
		{"inflight=x", "inflight"},
		{"confirm=maybe", "confirm"},
		{"heartbeat=-1s", "heartbeat"},
		{"group=a&group=b", "group"},
		{"nack_mode=drop", "nack_mode"},
	} {
		_, err := amqp.ParseURL(mustURL(t, "amqp://h/?"+tc.query))
		var ue *relay.URLError
		if !errors.As(err, &ue) || !errors.Is(err, relay.ErrBadURL) || !strings.Contains(err.Error(), tc.param) {
			t.Errorf("%s: %v, want a *relay.URLError naming %s", tc.query, err, tc.param)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	cfg := parse(t, "amqp://u:secret@h/?confirm=false&mandatory=true&requeue_on_nack=false&delivery_limit=3&nack_mode=requeue&max_bytes=999999999&tls_ca=/x")
	err := cfg.ValidateSubscriber()
	if err == nil {
		t.Fatal("no error")
	}
	for _, p := range []string{`"group"`, `"mandatory"`, `"requeue_on_nack"`, `"delivery_limit"`, `"max_bytes"`, `"tls_ca"`} {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error does not name %s: %v", p, err)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error leaks the password: %v", err)
	}
	if !errors.Is(err, relay.ErrBadURL) {
		t.Errorf("error does not match ErrBadURL")
	}
	// The publisher does not need a group.
	pcfg := parse(t, "amqp://h/")
	if err := pcfg.Validate(); err != nil {
		t.Errorf("publisher Validate: %v", err)
	}
	// Config.URL with a query is refused: options are fields.
	pcfg.URL = "amqp://h/?group=x"
	if err := pcfg.Validate(); err == nil {
		t.Errorf("Config.URL with a query accepted")
	}
}

func TestOpenRequiresGroup(t *testing.T) {
	_, err := relay.OpenSubscriber(context.Background(), "amqp://guest:guest@127.0.0.1:1/")
	if !errors.Is(err, relay.ErrBadURL) || !strings.Contains(err.Error(), "group") {
		t.Errorf("OpenSubscriber without group = %v, want a URL error naming group", err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// Port 1 refuses connections: Open fails within ctx instead of hanging.
	_, err := relay.OpenPublisher(ctx, "amqp://guest:guest@127.0.0.1:1/")
	if err == nil || strings.Contains(err.Error(), "guest:guest") {
		t.Errorf("OpenPublisher to a closed port = %v, want an error without the password", err)
	}
}
