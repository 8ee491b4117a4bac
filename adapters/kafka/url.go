package kafka

import (
	"context"
	"net"
	"net/url"
	"strings"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/tlsconf"
	"github.com/go-relay/relay/driver/urlopt"
)

// Scheme is the URL scheme of this backend.
const Scheme = "kafka"

func init() { relay.Register(Scheme, opener{&urlOpener}) }

// opener is kafka://'s relay.Opener; it also opens exactly-once pairs
// (see exactlyonce.go).
type opener struct{ *driver.Opener[urlConfig] }

// urlOpener opens kafka://host:9092?... (see docs/kafka.md).
var urlOpener = driver.Opener[urlConfig]{
	Backend: "kafka",
	Parse: func(u *url.URL, subscriber bool) (urlConfig, error) {
		pc, sc, err := parseURL(u, subscriber)
		return urlConfig{pc, sc}, err
	},
	NewPublisher: func(ctx context.Context, c urlConfig) (relay.Publisher, error) {
		return NewPublisher(ctx, c.pub)
	},
	NewSubscriber: func(ctx context.Context, c urlConfig) (relay.Subscriber, error) {
		return NewSubscriber(ctx, c.sub)
	},
	Defaults: relay.URLDefaults{
		// A source settles by committing offsets, one round trip per
		// settlement batch: a larger window keeps records flowing
		// meanwhile.
		SourceWindow: 4096,
		// A bridge only reads payloads: it need not pay a copy per record.
		SourceParams: map[string]string{"share_payloads": "true"},
		EitherSide:   true,
	},
}

// urlConfig is what a kafka:// URL configures, for both sides.
type urlConfig struct {
	pub PublisherConfig
	sub SubscriberConfig
}

// ParsePublisherURL reads a kafka:// URL into a PublisherConfig. One URL
// serves both sides: the subscriber parameters are ignored, but the URL is
// checked for both sides (see ParseSubscriberURL), except that no group is
// required. Every problem is reported (*relay.URLError, joined), including
// unknown parameters.
func ParsePublisherURL(u *url.URL) (PublisherConfig, error) {
	pc, _, err := parseURL(u, false)
	return pc, err
}

// ParseSubscriberURL reads a kafka:// URL into a SubscriberConfig. One URL
// serves both sides: the publisher parameters are ignored, but the URL is
// checked for both sides. Every problem is reported (*relay.URLError,
// joined), including unknown parameters and a missing group.
func ParseSubscriberURL(u *url.URL) (SubscriberConfig, error) {
	_, sc, err := parseURL(u, true)
	return sc, err
}

// parseURL reads the parameters of both sides and reports the problems of
// both, the missing group only for a subscriber.
func parseURL(u *url.URL, subscriber bool) (PublisherConfig, SubscriberConfig, error) {
	p := urlopt.New(u)
	var common Config
	parseCommon(u, p, &common)

	pc := PublisherConfig{Config: common}
	pc.Acks = p.Enum("acks", AcksAll, AcksAll, AcksLeader, AcksNone)
	if p.Has("idempotent") {
		idem := p.Bool("idempotent", true)
		pc.NoIdempotence = !idem
		if idem && pc.Acks != AcksAll {
			p.Fail("idempotent", "idempotence needs acks=all")
		}
	}
	pc.Linger = p.Duration("linger", 0)
	pc.Compression = p.Enum("compression", "snappy", "none", "gzip", "snappy", "lz4", "zstd")
	pc.MaxMessageBytes = p.Size("max_bytes", DefaultMaxMessageBytes, 1)
	pc.DeliveryTimeout = p.Duration("delivery_timeout", 0)
	pc.TransactionalID = p.String("transactional_id", "")
	pc.TransactionTimeout = p.Duration("transaction_timeout", 0)

	sc := SubscriberConfig{Config: common}
	sc.Group = p.String("group", "")
	sc.Start = p.Enum("start", StartEarliest, StartEarliest, StartLatest)
	sc.InFlight = p.Int("inflight", 0, 1)
	sc.InFlightBytes = p.Bytes("inflight_bytes", 0)
	sc.SessionTimeout = p.Duration("session_timeout", DefaultSessionTimeout)
	sc.HeartbeatInterval = p.Duration("heartbeat_interval", DefaultHeartbeat)
	sc.RebalanceTimeout = p.Duration("rebalance_timeout", DefaultRebalanceTimeout)
	sc.FetchMaxWait = p.Duration("fetch_max_wait", DefaultFetchMaxWait)
	sc.FetchMaxBytes = p.Size("fetch_max_bytes", DefaultFetchMaxBytes, 1)
	sc.Balancer = p.Enum("balancer", "cooperative-sticky", "cooperative-sticky", "sticky", "range", "roundrobin")
	sc.CommitInterval = p.Duration("commit_interval", 0)
	sc.MaxUncommitted = p.Int("max_uncommitted", DefaultMaxUncommitted, 1)
	sc.ReadUncommitted = p.Enum("isolation", "read_committed", "read_committed", "read_uncommitted") == "read_uncommitted"
	sc.SharePayloads = p.Bool("share_payloads", false)

	pc.defaults()
	sc.defaults()
	ps := pc.Config.problems()
	ps = append(ps, pc.ownProblems()...)
	ps = append(ps, sc.ownProblems(subscriber)...)
	for _, pr := range ps {
		p.Fail(pr.param, "%s", pr.reason)
	}
	return pc, sc, p.Err()
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
	c.RequestTimeout = p.Duration("request_timeout", DefaultRequestTimeout)
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

func withPort(hostport string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	h := strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	return net.JoinHostPort(h, DefaultPort)
}
