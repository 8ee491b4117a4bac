package kafka

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestParseSubscriberURL(t *testing.T) {
	u := mustURL(t, "kafka://u:secret@b1?seed=b2:9093,b3:1&seed=[::1]:7&group=g&start=latest&inflight=9&session_timeout=7s"+
		"&heartbeat_interval=1s&rebalance_timeout=9s&fetch_max_wait=50ms&fetch_max_bytes=65536&balancer=range&commit_interval=10ms&max_uncommitted=5"+
		"&isolation=read_uncommitted&client_id=c&dial_timeout=2s&request_timeout=4s&metadata_min_age=3s&tls_ca=/ca.pem&tls_insecure=true"+
		"&tls_server_name=kafka.local&sasl_mechanism=SCRAM-SHA-512&partitions=6&replication=3&create_topics=false&share_payloads=true")
	cfg, err := ParseSubscriberURL(u)
	if err != nil {
		t.Fatal(err)
	}
	want := SubscriberConfig{
		Config: Config{
			Brokers: []string{"b1:9092", "b2:9093", "b3:1", "[::1]:7"}, ClientID: "c", DialTimeout: 2 * time.Second, RequestTimeout: 4 * time.Second,
			MetadataMinAge: 3 * time.Second, TLS: true, TLSCAFile: "/ca.pem", TLSInsecure: true, TLSServerName: "kafka.local",
			SASLMechanism: SASLScramSHA512, SASLUser: "u", SASLPassword: "secret", Partitions: 6, Replication: 3, NoCreateTopics: true,
		},
		Group: "g", Start: StartLatest, InFlight: 9, SessionTimeout: 7 * time.Second, HeartbeatInterval: time.Second,
		RebalanceTimeout: 9 * time.Second, FetchMaxWait: 50 * time.Millisecond, FetchMaxBytes: 65536, Balancer: "range", CommitInterval: 10 * time.Millisecond,
		MaxUncommitted: 5, ReadUncommitted: true, SharePayloads: true,
	}
	cfg.Logger = nil
	if got, w := strings.Join(cfg.Brokers, " "), strings.Join(want.Brokers, " "); got != w {
		t.Fatalf("brokers %s, want %s", got, w)
	}
	cfg.Brokers, want.Brokers = nil, nil
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
}

func TestParseDefaults(t *testing.T) {
	s, err := ParseSubscriberURL(mustURL(t, "kafka://h?group=g"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Start != StartEarliest || s.InFlight != 0 || s.Balancer != "cooperative-sticky" || s.ReadUncommitted ||
		s.NoCreateTopics || s.SessionTimeout != DefaultSessionTimeout || s.MaxUncommitted != DefaultMaxUncommitted || s.SharePayloads {
		t.Fatalf("subscriber defaults: %+v", s)
	}
	p, err := ParsePublisherURL(mustURL(t, "kafka://h"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Acks != AcksAll || p.NoIdempotence || p.Linger != 0 || p.Compression != "snappy" || p.MaxMessageBytes != DefaultMaxMessageBytes {
		t.Fatalf("publisher defaults: %+v", p)
	}
	p, err = ParsePublisherURL(mustURL(t, "kafka://h?acks=leader&linger=5ms&compression=zstd&max_bytes=100&delivery_timeout=3s"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Acks != AcksLeader || !p.NoIdempotence || p.Linger != 5*time.Millisecond || p.Compression != "zstd" || p.MaxMessageBytes != 100 || p.DeliveryTimeout != 3*time.Second {
		t.Fatalf("publisher: %+v", p)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		pub    bool
		url    string
		params []string // every parameter the error must name
	}{
		{false, "kafka://h", []string{"group"}},
		{false, "kafka://h?group=g&bogus=1", []string{"bogus"}},
		// The other side's parameters are ignored, their values checked.
		{false, "kafka://h?group=g&acks=some", []string{"acks"}},
		{true, "kafka://h?inflight=0", []string{"inflight"}},
		{true, "kafka://h?session_timeout=1s&heartbeat_interval=2s", []string{"heartbeat_interval"}},
		{true, "kafka://h?acks=leader&idempotent=true", []string{"idempotent"}},
		{true, "kafka://h?acks=some&compression=brotli&linger=x", []string{"acks", "compression", "linger"}},
		{false, "kafka://h?group=g&start=middle&balancer=x&session_timeout=1s&heartbeat_interval=2s", []string{"start", "balancer", "heartbeat_interval"}},
		{true, "kafka://?client_id=x", []string{"seed"}},
		{true, "kafka://h/topic", []string{"path"}},
		{true, "kafka://h?sasl_user=u&sasl_password=hunter2", []string{"sasl_mechanism"}},
		{true, "kafka://h?sasl_mechanism=gssapi", []string{"sasl_mechanism"}},
		{true, "kafka://h?sasl_mechanism=plain", []string{"sasl_user"}},
		{true, "kafka://h?tls_cert=/c.pem", []string{"tls_cert"}},
		{true, "kafka://h?partitions=-1", []string{"partitions"}},
		{false, "kafka://h?group=g&isolation=dirty", []string{"isolation"}},
		{false, "kafka://h?group=g&share_payloads=maybe", []string{"share_payloads"}},
		{true, "kafka://h?transaction_timeout=soon", []string{"transaction_timeout"}},
	}
	for _, c := range cases {
		var err error
		if c.pub {
			_, err = ParsePublisherURL(mustURL(t, c.url))
		} else {
			_, err = ParseSubscriberURL(mustURL(t, c.url))
		}
		if err == nil {
			t.Errorf("%s: no error", c.url)
			continue
		}
		if !errors.Is(err, relay.ErrBadURL) {
			t.Errorf("%s: %v does not match ErrBadURL", c.url, err)
		}
		for _, p := range c.params {
			if !strings.Contains(err.Error(), `"`+p+`"`) {
				t.Errorf("%s: error does not name %q: %v", c.url, p, err)
			}
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: password in error: %v", c.url, err)
		}
	}
}

func TestValidate(t *testing.T) {
	err := SubscriberConfig{Start: "x", Config: Config{SASLMechanism: "plain"}}.Validate()
	for _, want := range []string{"group", "start", "seed", "sasl_user"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate: %v, want it to mention %s", err, want)
		}
	}
	if err := (PublisherConfig{Config: Config{Brokers: []string{"h:1"}}}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateTopic(t *testing.T) {
	for _, ok := range []string{"a", "A.b_c-9", strings.Repeat("x", 249)} {
		if err := validateTopic(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a b", "ä", "a/b", strings.Repeat("x", 250)} {
		if err := validateTopic(bad); !errors.Is(err, relay.ErrInvalidTopic) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
