package kafka

import (
	"context"
	"net"
	"net/url"
	"strings"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/tlsconf"
	"github.com/go-relay/relay/internal/urlopt"
)

// Scheme is the URL scheme of this backend.
const Scheme = "kafka"

func init() { relay.Register(Scheme, opener{}) }

type opener struct{}

// Parameters that only one side reads; the other side names them in its error.
var (
	publisherOnly  = []string{"acks", "idempotent", "linger", "compression", "max_bytes", "delivery_timeout"}
	subscriberOnly = []string{"group", "start", "inflight", "session_timeout", "heartbeat_interval", "rebalance_timeout",
		"fetch_max_wait", "fetch_max_bytes", "balancer", "commit_interval", "max_uncommitted", "isolation"}
)

func (opener) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	cfg, err := ParsePublisherURL(u)
	if err != nil {
		return nil, err
	}
	return NewPublisher(ctx, cfg)
}

func (opener) OpenSubscriber(ctx context.Context, u *url.URL) (relay.Subscriber, error) {
	cfg, err := ParseSubscriberURL(u)
	if err != nil {
		return nil, err
	}
	return NewSubscriber(ctx, cfg)
}

// ParsePublisherURL reads a kafka:// URL into a PublisherConfig. Every
// problem is reported (*relay.URLError, joined), including unknown
// parameters.
func ParsePublisherURL(u *url.URL) (PublisherConfig, error) {
	p := urlopt.New(u)
	var cfg PublisherConfig
	parseCommon(u, p, &cfg.Config)
	cfg.Acks = p.Enum("acks", AcksAll, AcksAll, AcksLeader, AcksNone)
	if p.Has("idempotent") {
		idem := p.Bool("idempotent", true)
		cfg.NoIdempotence = !idem
		if idem && cfg.Acks != AcksAll {
			p.Fail("idempotent", "idempotence needs acks=all")
		}
	}
	cfg.Linger = p.Duration("linger", 0)
	cfg.Compression = p.Enum("compression", "snappy", "none", "gzip", "snappy", "lz4", "zstd")
	cfg.MaxMessageBytes = p.Int("max_bytes", DefaultMaxMessageBytes, 1)
	cfg.DeliveryTimeout = p.Duration("delivery_timeout", 0)
	rejectOtherSide(p, subscriberOnly, "a subscriber option; a publisher does not take it")
	cfg.defaults()
	for _, pr := range cfg.problems() {
		p.Fail(pr.param, "%s", pr.reason)
	}
	return cfg, p.Err()
}

// ParseSubscriberURL reads a kafka:// URL into a SubscriberConfig. Every
// problem is reported (*relay.URLError, joined), including unknown
// parameters and a missing group.
func ParseSubscriberURL(u *url.URL) (SubscriberConfig, error) {
	p := urlopt.New(u)
	var cfg SubscriberConfig
	parseCommon(u, p, &cfg.Config)
	cfg.Group = p.String("group", "")
	cfg.Start = p.Enum("start", StartEarliest, StartEarliest, StartLatest)
	cfg.InFlight = p.Int("inflight", DefaultInFlight, 1)
	cfg.SessionTimeout = p.Duration("session_timeout", DefaultSessionTimeout)
	cfg.HeartbeatInterval = p.Duration("heartbeat_interval", DefaultHeartbeat)
	cfg.RebalanceTimeout = p.Duration("rebalance_timeout", DefaultRebalanceTimeout)
	cfg.FetchMaxWait = p.Duration("fetch_max_wait", DefaultFetchMaxWait)
	cfg.FetchMaxBytes = p.Int("fetch_max_bytes", DefaultFetchMaxBytes, 1)
	cfg.Balancer = p.Enum("balancer", "cooperative-sticky", "cooperative-sticky", "sticky", "range", "roundrobin")
	cfg.CommitInterval = p.Duration("commit_interval", 0)
	cfg.MaxUncommitted = p.Int("max_uncommitted", DefaultMaxUncommitted, 1)
	cfg.ReadUncommitted = p.Enum("isolation", "read_committed", "read_committed", "read_uncommitted") == "read_uncommitted"
	rejectOtherSide(p, publisherOnly, "a publisher option; a subscriber does not take it")
	cfg.defaults()
	for _, pr := range cfg.problems() {
		p.Fail(pr.param, "%s", pr.reason)
	}
	return cfg, p.Err()
}

func parseCommon(u *url.URL, p *urlopt.Params, c *Config) {
	if u.Host != "" {
		c.Brokers = append(c.Brokers, withPort(u.Host))
	}
	for _, s := range p.Strings("seed") {
		for _, b := range strings.Split(s, ",") {
			if b = strings.TrimSpace(b); b != "" {
				c.Brokers = append(c.Brokers, withPort(b))
			}
		}
	}
	if u.Path != "" && u.Path != "/" {
		p.Fail("path", "kafka URLs take no path (got %q); topics are given to Publish and Subscribe", u.Path)
	}
	c.ClientID = p.String("client_id", DefaultClientID)
	c.DialTimeout = p.Duration("dial_timeout", DefaultDialTimeout)
	c.MetadataMinAge = p.Duration("metadata_min_age", DefaultMetadataMinAge)

	c.TLS = p.Bool("tls", false)
	tf := tlsconf.Read(p)
	c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = tf.CAFile, tf.CertFile, tf.KeyFile
	c.TLSInsecure, c.TLSServerName = tf.Insecure, tf.ServerName

	c.SASLMechanism = strings.ToLower(p.String("sasl_mechanism", ""))
	c.SASLUser = p.String("sasl_user", "")
	c.SASLPassword = p.String("sasl_password", "")
	if u.User != nil {
		if c.SASLUser != "" {
			p.Fail("sasl_user", "given both in the URL's user info and as a parameter")
		}
		c.SASLUser = u.User.Username()
		if pw, ok := u.User.Password(); ok {
			if c.SASLPassword != "" {
				p.Fail("sasl_password", "given both in the URL's user info and as a parameter")
			}
			c.SASLPassword = pw
		}
	}

	c.Partitions = p.Int("partitions", 0, 0)
	c.Replication = p.Int("replication", 0, 0)
	c.NoCreateTopics = !p.Bool("create_topics", true)
}

func rejectOtherSide(p *urlopt.Params, names []string, reason string) {
	for _, n := range names {
		if p.Has(n) {
			p.Fail(n, "%s", reason)
		}
	}
}

func withPort(hostport string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	h := strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	return net.JoinHostPort(h, DefaultPort)
}
