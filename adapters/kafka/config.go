package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/go-relay/relay/driver/tlsconf"
)

// Defaults of the configuration. Each is documented on its field.
const (
	DefaultPort             = "9092"
	DefaultClientID         = "relay"
	DefaultDialTimeout      = 10 * time.Second
	DefaultRequestTimeout   = 10 * time.Second
	DefaultMetadataMinAge   = time.Second
	DefaultMaxMessageBytes  = 1 << 20
	DefaultInFlight         = 256
	DefaultSessionTimeout   = 45 * time.Second
	DefaultHeartbeat        = 3 * time.Second
	DefaultRebalanceTimeout = 60 * time.Second
	DefaultFetchMaxWait     = time.Second
	DefaultFetchMaxBytes    = 1 << 20
	DefaultMaxUncommitted   = 10000
)

// Start positions of a new group (SubscriberConfig.Start, start=).
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// Acknowledgement levels (PublisherConfig.Acks, acks=).
const (
	AcksAll    = "all"
	AcksLeader = "leader"
	AcksNone   = "none"
)

// SASL mechanisms (Config.SASLMechanism, sasl_mechanism=).
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// Config is what publishers and subscribers share: how to reach and
// authenticate to the cluster, and how topics are created. The URL
// parameter of each field is given in parentheses.
type Config struct {
	// Brokers are the seed brokers, host:port (URL host plus every seed=).
	// A missing port means 9092. At least one is required.
	Brokers []string
	// ClientID identifies the client in broker logs and quotas (client_id=).
	// Default "relay".
	ClientID string
	// DialTimeout bounds each connection attempt (dial_timeout=). Default 10s.
	DialTimeout time.Duration
	// RequestTimeout is how long a request may go unanswered beyond the
	// time the request itself asks the broker to wait (a fetch's max wait,
	// a produce's timeout) before the connection is declared dead and the
	// request retried on a new one (request_timeout=, franz-go's
	// RequestTimeoutOverhead). It bounds how soon a broker that went
	// silent is noticed (Health reports it). Default 10s.
	RequestTimeout time.Duration
	// MetadataMinAge is the shortest interval between metadata refreshes,
	// which bounds how fast the client reacts to a moved leader or a dropped
	// connection (metadata_min_age=). Default 1s.
	MetadataMinAge time.Duration

	// TLS enables TLS (tls=true). It is implied by any TLS file option.
	TLS bool
	// TLSCAFile is a PEM file of CAs to trust instead of the system pool (tls_ca=).
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a PEM client certificate and key for
	// mutual TLS (tls_cert=, tls_key=); both or neither.
	TLSCertFile string
	TLSKeyFile  string
	// TLSInsecure skips verification of the broker certificate (tls_insecure=true).
	// For tests only.
	TLSInsecure bool
	// TLSServerName overrides the name verified in the broker certificate
	// (tls_server_name=).
	TLSServerName string
	// TLSConfig, when set, is used as is (cloned) and the TLS file options
	// must be empty. Not reachable from a URL.
	TLSConfig *tls.Config

	// SASLMechanism is plain, scram-sha-256 or scram-sha-512
	// (sasl_mechanism=). Empty: no SASL. Required when a user is given.
	SASLMechanism string
	// SASLUser and SASLPassword are the SASL credentials (sasl_user=,
	// sasl_password=, or user:password@ in the URL). URLs are redacted
	// before they are logged or put into errors.
	SASLUser     string
	SASLPassword string

	// Partitions and Replication are used when a topic is created
	// (partitions=, replication=). 0 means the broker's default
	// (num.partitions, default.replication.factor).
	Partitions  int
	Replication int
	// NoCreateTopics disables creating missing topics on first publish,
	// Subscribe and Provision (create_topics=false). Default: topics are
	// created.
	NoCreateTopics bool

	// Logger receives client warnings and errors. Default slog.Default().
	// Not reachable from a URL.
	Logger *slog.Logger
}

// PublisherConfig configures a publisher.
type PublisherConfig struct {
	Config
	// Acks is how many replicas must confirm a record: all, leader or none
	// (acks=). Default all. Publish returns only after this confirmation.
	Acks string
	// NoIdempotence disables the idempotent producer (idempotent=false).
	// Idempotence needs acks=all; with another Acks it is disabled unless
	// idempotent=true is asked for, which is then an error.
	NoIdempotence bool
	// Linger is how long a partition's batch waits for more records before
	// it is sent (linger=). Default 0: send as soon as possible; records
	// still batch while earlier requests are in flight.
	Linger time.Duration
	// Compression is none, gzip, snappy, lz4 or zstd (compression=).
	// Default snappy.
	Compression string
	// MaxMessageBytes bounds one record as the broker counts it (key,
	// value, headers and batch overhead) (max_bytes=). Default
	// 1 MiB, below Kafka's default message.max.bytes (1048588). Larger
	// messages fail at publish time with a *relay.LimitError.
	MaxMessageBytes int
	// DeliveryTimeout bounds how long a record may wait for delivery,
	// retries included (delivery_timeout=). Default 0: bounded only by the
	// Publish ctx.
	DeliveryTimeout time.Duration
	// TransactionalID is the Kafka transactional.id of NewTxPublisher and
	// NewExactlyOnce (transactional_id=): a name stable across restarts
	// and unique per running instance; a new client with the same ID
	// fences the old one. NewPublisher refuses it (see transact.go).
	TransactionalID string
	// TransactionTimeout is how long the broker lets a transaction stay
	// open before it aborts it (transaction_timeout=). Default 40s.
	TransactionTimeout time.Duration
}

// SubscriberConfig configures a subscriber.
type SubscriberConfig struct {
	Config
	// Group is the Kafka consumer group (group=). Required.
	Group string
	// Start is where a group that has no committed offset for the topic
	// begins: earliest (the oldest retained record) or latest (records
	// published from now on) (start=). Default earliest. See the package
	// documentation.
	Start string
	// InFlight bounds the unsettled messages of one subscription, across
	// its partitions (inflight=). Default 0: an adaptive window, starting
	// at DefaultInFlight and growing up to driver.DefaultMaxInFlight while
	// the handler keeps up with a backlog (see driver.Options.MaxInFlight).
	// A set value is fixed. An exactly-once pair's window is one
	// transaction, so it is fixed: DefaultInFlight when 0.
	InFlight int
	// InFlightBytes bounds the bytes (payload, ID, Key, metadata) of the
	// unsettled messages per subscription (inflight_bytes=, e.g. 64MiB),
	// beside InFlight; 0 takes driver.DefaultInFlightBytes (64 MiB), negative
	// means no byte bound.
	InFlightBytes int64
	// SessionTimeout is how long the group waits for a silent member
	// before reassigning its partitions (session_timeout=). Default 45s.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often a member heartbeats; it bounds how
	// quickly a member notices a rebalance (heartbeat_interval=). Default 3s.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the group waits for members to rejoin
	// during a rebalance (rebalance_timeout=). Default 60s.
	RebalanceTimeout time.Duration
	// FetchMaxWait is how long the broker holds a fetch that has no data
	// yet (fetch_max_wait=). Default 1s.
	FetchMaxWait time.Duration
	// FetchMaxBytes bounds one fetch response, and so the records the
	// client buffers beyond the in-flight window (fetch_max_bytes=), and
	// the record bytes queued ahead of each subscription (a poll takes a
	// fetch whole if the queue then holds at most four times as much). A
	// partition's first record comes even when larger. Default 1 MiB (a
	// quarter of it per partition).
	FetchMaxBytes int
	// Balancer is the partition assignor: cooperative-sticky, sticky,
	// range or roundrobin (balancer=). Default cooperative-sticky.
	Balancer string
	// CommitInterval delays commits so that more acks share one commit
	// request (commit_interval=). Default 0: commit as soon as the acked
	// prefix advances, one commit request in flight at a time.
	CommitInterval time.Duration
	// MaxUncommitted bounds, per partition, the delivered records held
	// behind the oldest unacked one once it has blocked the commit
	// position for over a second; beyond it fetching of that partition
	// pauses until the oldest is settled (max_uncommitted=). Default 10000.
	MaxUncommitted int
	// ReadUncommitted also delivers records of open and aborted
	// transactions (isolation=read_uncommitted). Default read_committed.
	ReadUncommitted bool
	// SharePayloads hands out messages whose Payload (and ID, Key and
	// metadata) share the memory franz-go fetched them into, instead of
	// copies (share_payloads=). It saves copying each field into the
	// subscription's arena, for consumers that only read payloads, such
	// as the bridge, which sets it on its kafka:// sources. Two rules
	// then hold for the handler:
	//   - it must not modify a Payload in place: a redelivery in this
	//     process (after a Nack) hands out the same bytes again, changes
	//     included, where by default it hands out the record as it was
	//     fetched (on an exactly-once subscription a Nack aborts the
	//     transaction and the records are fetched again either way);
	//   - whatever it keeps after settling the message (the Payload, or
	//     the ID, Key or a metadata value) keeps the whole fetch response
	//     it came from alive, up to fetch_max_bytes: copy what you keep
	//     (Message.Copy copies the payload, strings.Clone a string).
	// Default false.
	SharePayloads bool
}

type problem struct{ param, reason string }

func (c *Config) defaults() {
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MetadataMinAge <= 0 {
		c.MetadataMinAge = DefaultMetadataMinAge
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.tlsFiles().Set() || c.TLSConfig != nil {
		c.TLS = true
	}
	c.SASLMechanism = strings.ToLower(c.SASLMechanism)
}

func (c *Config) problems() []problem {
	var ps []problem
	if len(c.Brokers) == 0 {
		ps = append(ps, problem{"seed", "no broker: give kafka://host:port or seed=host:port"})
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			ps = append(ps, problem{"seed", fmt.Sprintf("%q is not host:port", b)})
		}
	}
	c.tlsFiles().Check(func(param, format string, args ...any) {
		ps = append(ps, problem{param, fmt.Sprintf(format, args...)})
	})
	if c.TLSConfig != nil && c.tlsFiles().Set() {
		ps = append(ps, problem{"tls", "TLSConfig excludes the TLS file options"})
	}
	switch c.SASLMechanism {
	case "":
		if c.SASLUser != "" || c.SASLPassword != "" {
			ps = append(ps, problem{"sasl_mechanism", "required with SASL credentials: plain, scram-sha-256 or scram-sha-512"})
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASLUser == "" {
			ps = append(ps, problem{"sasl_user", "required with sasl_mechanism"})
		}
	default:
		ps = append(ps, problem{"sasl_mechanism", fmt.Sprintf("%q is not one of plain, scram-sha-256, scram-sha-512", c.SASLMechanism)})
	}
	if c.Partitions < 0 {
		ps = append(ps, problem{"partitions", "must not be negative (0 = broker default)"})
	}
	if c.Replication < 0 || c.Replication > 32767 {
		ps = append(ps, problem{"replication", "must be between 0 (broker default) and 32767"})
	}
	return ps
}

func (c *PublisherConfig) defaults() {
	c.Config.defaults()
	if c.Acks == "" {
		c.Acks = AcksAll
	}
	if c.Acks != AcksAll {
		c.NoIdempotence = true
	}
	if c.Compression == "" {
		c.Compression = "snappy"
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
}

func (c *PublisherConfig) problems() []problem {
	return append(c.Config.problems(), c.ownProblems()...)
}

// ownProblems are the problems of the publisher-only fields.
func (c *PublisherConfig) ownProblems() []problem {
	var ps []problem
	switch c.Acks {
	case "", AcksAll, AcksLeader, AcksNone:
	default:
		ps = append(ps, problem{"acks", fmt.Sprintf("%q is not one of all, leader, none", c.Acks)})
	}
	switch c.Compression {
	case "", "none", "gzip", "snappy", "lz4", "zstd":
	default:
		ps = append(ps, problem{"compression", fmt.Sprintf("%q is not one of none, gzip, snappy, lz4, zstd", c.Compression)})
	}
	if c.MaxMessageBytes < 0 {
		ps = append(ps, problem{"max_bytes", "must be positive"})
	}
	if c.Linger < 0 || c.Linger > time.Minute {
		ps = append(ps, problem{"linger", "must be between 0 and 1m"})
	}
	return ps
}

// Validate reports every problem of the configuration at once, or nil.
// Zero values stand for the documented defaults.
func (c PublisherConfig) Validate() error { return join(c.problems()) }

func (c *SubscriberConfig) defaults() {
	c.Config.defaults()
	if c.Start == "" {
		c.Start = StartEarliest
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeat
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.FetchMaxWait <= 0 {
		c.FetchMaxWait = DefaultFetchMaxWait
	}
	if c.FetchMaxBytes <= 0 {
		c.FetchMaxBytes = DefaultFetchMaxBytes
	}
	if c.Balancer == "" {
		c.Balancer = "cooperative-sticky"
	}
	if c.MaxUncommitted <= 0 {
		c.MaxUncommitted = DefaultMaxUncommitted
	}
}

func (c *SubscriberConfig) problems() []problem {
	return append(c.Config.problems(), c.ownProblems(true)...)
}

// ownProblems are the problems of the subscriber-only fields, the missing
// group only with requireGroup.
func (c *SubscriberConfig) ownProblems(requireGroup bool) []problem {
	var ps []problem
	if requireGroup && c.Group == "" {
		ps = append(ps, problem{"group", "required: the consumer group of this subscriber"})
	}
	switch c.Start {
	case "", StartEarliest, StartLatest:
	default:
		ps = append(ps, problem{"start", fmt.Sprintf("%q is not earliest or latest", c.Start)})
	}
	switch c.Balancer {
	case "", "cooperative-sticky", "sticky", "range", "roundrobin":
	default:
		ps = append(ps, problem{"balancer", fmt.Sprintf("%q is not one of cooperative-sticky, sticky, range, roundrobin", c.Balancer)})
	}
	if c.SessionTimeout > 0 && c.HeartbeatInterval >= c.SessionTimeout {
		ps = append(ps, problem{"heartbeat_interval", "must be shorter than session_timeout"})
	}
	if c.InFlight < 0 {
		ps = append(ps, problem{"inflight", "must be positive"})
	}
	return ps
}

// Validate reports every problem of the configuration at once, or nil.
// Zero values stand for the documented defaults.
func (c SubscriberConfig) Validate() error { return join(c.problems()) }

func join(ps []problem) error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = fmt.Errorf("relay/kafka: %s: %s", p.param, p.reason)
	}
	return errors.Join(errs...)
}

// clientOpts are the kgo options every client of c uses.
func (c *Config) clientOpts() ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.DialTimeout(c.DialTimeout),
		kgo.RequestTimeoutOverhead(c.RequestTimeout),
		kgo.MetadataMinAge(c.MetadataMinAge),
		kgo.WithLogger(kgoLogger{c.Logger}),
	}
	if c.TLS {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch c.SASLMechanism {
	case SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsMechanism()))
	case SASLScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha256Mechanism()))
	case SASLScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha512Mechanism()))
	}
	return opts, nil
}

// tlsFiles are the TLS file fields in the shared form.
func (c *Config) tlsFiles() tlsconf.Files {
	return tlsconf.Files{CAFile: c.TLSCAFile, CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile,
		ServerName: c.TLSServerName, Insecure: c.TLSInsecure}
}

// tlsConfig is TLSConfig (cloned) or built from the file fields. An empty
// server name lets franz-go verify each broker's own host name.
func (c *Config) tlsConfig() (*tls.Config, error) {
	if c.TLSConfig != nil {
		return c.TLSConfig.Clone(), nil
	}
	tc, err := c.tlsFiles().Config("")
	if err != nil {
		return nil, fmt.Errorf("relay/kafka: %w", err)
	}
	return tc, nil
}

func (c *PublisherConfig) producerOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.ProducerLinger(c.Linger),
		kgo.ProducerBatchMaxBytes(int32(c.MaxMessageBytes)),
	}
	switch c.Acks {
	case AcksAll:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case AcksLeader:
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	case AcksNone:
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	}
	if c.NoIdempotence {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	switch c.Compression {
	case "none":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	case "gzip":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	case "snappy":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case "lz4":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case "zstd":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	}
	if c.DeliveryTimeout > 0 {
		opts = append(opts, kgo.RecordDeliveryTimeout(c.DeliveryTimeout))
	}
	return opts
}

func (c *SubscriberConfig) balancer() kgo.GroupBalancer {
	switch c.Balancer {
	case "sticky":
		return kgo.StickyBalancer()
	case "range":
		return kgo.RangeBalancer()
	case "roundrobin":
		return kgo.RoundRobinBalancer()
	}
	return kgo.CooperativeStickyBalancer()
}
