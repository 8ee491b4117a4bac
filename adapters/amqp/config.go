package amqp

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/tlsconf"
	"github.com/go-relay/relay/driver/urlopt"
)

// Exchange kinds.
const (
	KindFanout = "fanout" // every group gets every message; Key is carried, not routed on
	KindTopic  = "topic"  // routed on Key with binding patterns (default binding "#")
	KindDirect = "direct" // routed on Key by exact binding keys (default binding "")
)

// Queue types.
const (
	QueueClassic = "classic"
	QueueQuorum  = "quorum"
)

// Nack modes: how a plain Nack (no delay) puts a message back.
const (
	// NackRequeue: basic.nack with requeue. The message keeps its place in
	// the queue. Attempt is exact on quorum queues (x-delivery-count); on
	// classic queues, which do not count requeues, the subscriber counts
	// them in process: exact while the message comes back to the same
	// process, at least 2 in another one.
	NackRequeue = "requeue"
	// NackRepublish: a copy with an incremented attempt header is published
	// (with confirms) to the group's queue, then the original is acked. The
	// message goes to the back of the queue; Attempt is exact on every
	// queue type.
	NackRepublish = "republish"
)

// Defaults.
const (
	DefaultInFlight        = 64
	DefaultMaxBytes        = 16 << 20
	DefaultPublishChannels = 2
	DefaultHeartbeat       = 10 * time.Second
	DefaultConnectTimeout  = 30 * time.Second
	DefaultReconnectMin    = 100 * time.Millisecond
	DefaultReconnectMax    = 5 * time.Second
	// MaxBrokerBytes is RabbitMQ 3.x's default max_message_size; max_bytes
	// may not exceed it.
	MaxBrokerBytes = 128 << 20
)

// Config configures a Publisher or a Subscriber. A publisher ignores the
// subscriber-only fields (and the other way round), so one URL serves both.
// Every field except the function and TLS object fields is reachable as a
// URL query parameter, named in its doc. Use DefaultConfig or ParseURL to
// get the defaults; Validate reports every problem at once.
type Config struct {
	// URL is the broker: amqp://user:pass@host:5672/vhost or amqps://...,
	// without query parameters.
	URL string

	// Group names this subscriber's group of competing consumers (group=).
	// Required for subscribers.
	Group string

	// ExchangeKind is the kind of the per-topic exchange (exchange_kind=):
	// fanout (default), topic or direct. Messages are always published
	// with Message.Key as routing key.
	ExchangeKind string
	// ExchangePrefix is prepended to the topic to name its exchange
	// (exchange_prefix=). Default "".
	ExchangePrefix string
	// QueuePrefix is prepended to "<topic>.<group>" to name a group's queue
	// (queue_prefix=). Default "".
	QueuePrefix string
	// BindingKeys bind the group's queue to the topic's exchange
	// (binding_key=, repeatable). Default: "#" for topic exchanges, "" otherwise.
	BindingKeys []string
	// QueueType is classic (default) or quorum (queue_type=). Quorum queues
	// count deliveries, so Attempt survives requeues and consumer crashes.
	QueueType string
	// InFlight is the per-subscription window of unsettled messages and the
	// channel's prefetch count (inflight=). Default 0: an adaptive window,
	// starting at DefaultInFlight and growing up to
	// driver.DefaultMaxInFlight while the handler keeps up with a backlog
	// (see driver.Options.MaxInFlight), the prefetch count raised with it.
	InFlight int
	// InFlightBytes bounds the bytes (payload, ID, Key, metadata) of the
	// unsettled messages per subscription (inflight_bytes=, e.g. 64MiB),
	// beside InFlight; 0 takes driver.DefaultInFlightBytes (64 MiB), negative
	// means no byte bound.
	InFlightBytes int64
	// NackMode is requeue or republish (nack_mode=). Default: republish for
	// classic queues (exact Attempt), requeue for quorum queues.
	NackMode string
	// RequeueOnNack (requeue_on_nack=, default true): false makes every Nack
	// and NackAfter reject the message without requeue, so that the broker
	// moves it to DeadLetterExchange. Needs DeadLetterExchange.
	RequeueOnNack bool
	// DeadLetterExchange is set as x-dead-letter-exchange on group queues
	// (dead_letter_exchange=). Declared as a durable fanout exchange if it
	// does not exist. Default none.
	DeadLetterExchange string
	// SingleActiveConsumer (single_active_consumer=) declares group queues
	// with x-single-active-consumer: one member of the group at a time
	// consumes the queue, in order, and another takes over when it goes
	// (connection closed or lost). For a group whose order matters (an
	// ordered bridge route with replicas); a queue keeps the argument it
	// was declared with. Default false: competing consumers.
	SingleActiveConsumer bool
	// DeliveryLimit (delivery_limit=) dead-letters a message whose Nack
	// would start attempt DeliveryLimit+1; quorum queues also get it as
	// x-delivery-limit. 0 = none (default). Needs DeadLetterExchange.
	DeliveryLimit int
	// NativeDelay (native_delay=, default true) implements NackAfter with
	// per-group delay queues (message TTL, dead-lettered back to the group's
	// queue). false keeps the message unacked in the process for the delay.
	NativeDelay bool

	// Confirm enables publisher confirms (confirm=, default true): Publish
	// returns only after the broker took responsibility for every message.
	Confirm bool
	// Mandatory publishes with the mandatory flag (mandatory=, default true
	// when Confirm): a message no queue is bound for fails with
	// ErrUnroutable instead of being dropped. Needs Confirm.
	Mandatory bool
	// PublishChannels is the size of the publisher's channel pool
	// (publish_channels=). Concurrent Publish calls share the channels
	// round-robin, each pipelining its messages. Default 2.
	PublishChannels int
	// MaxBytes bounds payload plus ID, Key and metadata of a message
	// (max_bytes=). Default 16 MiB; at most 128 MiB (RabbitMQ's own limit).
	MaxBytes int

	// Heartbeat is the AMQP heartbeat interval (heartbeat=). Default 10s.
	Heartbeat time.Duration
	// ConnectTimeout bounds one dial plus handshake (connect_timeout=).
	// Default 30s.
	ConnectTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the jittered exponential backoff
	// between reconnect attempts (reconnect_min=, reconnect_max=).
	// Defaults 100ms and 5s.
	ReconnectMin, ReconnectMax time.Duration
	// ConnectionName is shown in the management UI (connection_name=).
	ConnectionName string

	// TLS for amqps:// URLs: CA bundle file (tls_ca=), client certificate
	// and key files (tls_cert=, tls_key=), server name (tls_server_name=),
	// and tls_insecure= (skip certificate verification; tests only).
	TLSCAFile, TLSCertFile, TLSKeyFile, TLSServerName string
	TLSInsecureSkipVerify                             bool
	// TLSConfig, when set, is used as is and the tls_* fields must be empty.
	TLSConfig *tls.Config

	// Logger receives connection events and transient errors.
	// Default slog.Default().
	Logger *slog.Logger
	// OnStateChange, when set, is called with every connection state change
	// (connected, reconnecting, closed), in order and never concurrently. It
	// must not block: reconnecting waits for it.
	OnStateChange func(State)
}

// DefaultConfig returns the defaults for the broker at url.
func DefaultConfig(url string) Config {
	return Config{
		URL:             url,
		ExchangeKind:    KindFanout,
		QueueType:       QueueClassic,
		RequeueOnNack:   true,
		NativeDelay:     true,
		Confirm:         true,
		Mandatory:       true,
		PublishChannels: DefaultPublishChannels,
		MaxBytes:        DefaultMaxBytes,
		Heartbeat:       DefaultHeartbeat,
		ConnectTimeout:  DefaultConnectTimeout,
		ReconnectMin:    DefaultReconnectMin,
		ReconnectMax:    DefaultReconnectMax,
	}
}

// ParseURL reads a relay AMQP URL: the broker address plus the query
// parameters documented on Config. An unknown or malformed parameter is a
// *relay.URLError naming it. The result is not validated for a role; the
// opener calls Validate.
func ParseURL(u *url.URL) (Config, error) {
	base := *u
	base.RawQuery = ""
	base.Fragment = ""
	cfg := DefaultConfig(base.String())
	p := urlopt.New(u)

	cfg.Group = p.String("group", "")
	cfg.ExchangeKind = p.Enum("exchange_kind", KindFanout, KindFanout, KindTopic, KindDirect)
	cfg.ExchangePrefix = p.String("exchange_prefix", "")
	cfg.QueuePrefix = p.String("queue_prefix", "")
	if p.Has("binding_key") {
		cfg.BindingKeys = p.Strings("binding_key")
	}
	cfg.QueueType = p.Enum("queue_type", QueueClassic, QueueClassic, QueueQuorum)
	cfg.InFlight = p.Int("inflight", 0, 1)
	cfg.InFlightBytes = p.Bytes("inflight_bytes", 0)
	cfg.NackMode = p.Enum("nack_mode", "", NackRequeue, NackRepublish)
	cfg.RequeueOnNack = p.Bool("requeue_on_nack", true)
	cfg.DeadLetterExchange = p.String("dead_letter_exchange", "")
	cfg.DeliveryLimit = p.Int("delivery_limit", 0, 0)
	cfg.SingleActiveConsumer = p.Bool("single_active_consumer", false)
	cfg.NativeDelay = p.Bool("native_delay", true)
	cfg.Confirm = p.Bool("confirm", true)
	cfg.Mandatory = p.Bool("mandatory", cfg.Confirm)
	cfg.PublishChannels = p.Int("publish_channels", DefaultPublishChannels, 1)
	cfg.MaxBytes = p.Size("max_bytes", DefaultMaxBytes, 1)
	cfg.Heartbeat = p.Duration("heartbeat", DefaultHeartbeat)
	cfg.ConnectTimeout = p.Duration("connect_timeout", DefaultConnectTimeout)
	cfg.ReconnectMin = p.Duration("reconnect_min", DefaultReconnectMin)
	cfg.ReconnectMax = p.Duration("reconnect_max", DefaultReconnectMax)
	cfg.ConnectionName = p.String("connection_name", "")
	cfg.setTLSFiles(tlsconf.Read(p))
	if err := p.Err(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// role says what a Config is validated for.
type role int

const (
	rolePublisher  role = iota // a Config given to NewPublisher
	roleSubscriber             // a Config given to NewSubscriber
	// roleURL and roleURLSubscriber check a URL's Config for both sides
	// (one URL serves both), roleURLSubscriber adding the group requirement.
	roleURL
	roleURLSubscriber
)

func (r role) publisher() bool    { return r != roleSubscriber }
func (r role) subscriber() bool   { return r != rolePublisher }
func (r role) requireGroup() bool { return r == roleSubscriber || r == roleURLSubscriber }

// parseAndCheck is what the opener does before connecting: ParseURL, then
// every check of both sides, since one URL serves both, and the group
// requirement for a subscriber.
func parseAndCheck(u *url.URL, subscriber bool) (Config, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return cfg, err
	}
	r := roleURL
	if subscriber {
		r = roleURLSubscriber
	}
	return cfg, cfg.validate(r)
}

// Validate reports every problem of cfg for a publisher, joined.
func (c *Config) Validate() error { return c.validate(rolePublisher) }

// ValidateSubscriber reports every problem of cfg for a subscriber, joined.
func (c *Config) ValidateSubscriber() error { return c.validate(roleSubscriber) }

func (c *Config) validate(r role) error {
	var errs []error
	bad := func(param, format string, args ...any) {
		errs = append(errs, &relay.URLError{URL: relay.Redact(c.URL), Param: param, Reason: fmt.Sprintf(format, args...)})
	}
	u, err := relay.ParseURL(c.URL)
	switch {
	case err != nil:
		errs = append(errs, err) // a *relay.URLError saying why
	case u.Scheme != "amqp" && u.Scheme != "amqps":
		errs = append(errs, &relay.URLError{URL: relay.Redact(c.URL), Reason: "scheme must be amqp or amqps"})
	case u.RawQuery != "":
		errs = append(errs, &relay.URLError{URL: relay.Redact(c.URL), Reason: "Config.URL must not carry query parameters; set the Config fields"})
	default:
		if _, err := amqp091.ParseURI(c.URL); err != nil {
			errs = append(errs, &relay.URLError{URL: relay.Redact(c.URL), Reason: err.Error()})
		}
		tf := c.tlsFiles()
		if u.Scheme == "amqp" && (tf.Set() || c.TLSConfig != nil) {
			bad("tls_ca", "TLS options need an amqps:// URL")
		}
		if c.TLSConfig != nil && tf.Set() {
			bad("tls_ca", "set either Config.TLSConfig or the tls_* options, not both")
		}
		tf.Check(bad)
	}
	switch c.ExchangeKind {
	case KindFanout, KindTopic, KindDirect:
	default:
		bad("exchange_kind", "%q is not one of fanout, topic, direct", c.ExchangeKind)
	}
	if c.MaxBytes <= 0 || c.MaxBytes > MaxBrokerBytes {
		bad("max_bytes", "%d is outside 1..%d", c.MaxBytes, MaxBrokerBytes)
	}
	if c.Mandatory && !c.Confirm {
		bad("mandatory", "mandatory=true needs confirm=true, otherwise an unroutable message cannot be reported; set mandatory=false to accept silent drops")
	}
	if r.publisher() && c.PublishChannels <= 0 {
		bad("publish_channels", "must be at least 1")
	}
	if c.ConnectTimeout <= 0 {
		bad("connect_timeout", "must be positive")
	}
	if c.ReconnectMin <= 0 || c.ReconnectMax < c.ReconnectMin {
		bad("reconnect_max", "need 0 < reconnect_min <= reconnect_max")
	}
	if r.requireGroup() && c.Group == "" {
		bad("group", "required: the name of this subscriber's group of competing consumers")
	}
	if r.subscriber() {
		switch c.QueueType {
		case QueueClassic, QueueQuorum:
		default:
			bad("queue_type", "%q is not one of classic, quorum", c.QueueType)
		}
		switch c.NackMode {
		case "", NackRequeue, NackRepublish:
		default:
			bad("nack_mode", "%q is not one of requeue, republish", c.NackMode)
		}
		if c.InFlight < 0 {
			bad("inflight", "must not be negative")
		}
		if c.InFlight > 65535 {
			bad("inflight", "at most 65535 (AMQP prefetch count)")
		}
		if !c.RequeueOnNack && c.DeadLetterExchange == "" {
			bad("requeue_on_nack", "requeue_on_nack=false without dead_letter_exchange would drop every nacked message; set dead_letter_exchange")
		}
		if c.DeliveryLimit < 0 {
			bad("delivery_limit", "must not be negative")
		}
		if c.DeliveryLimit > 0 && c.DeadLetterExchange == "" {
			bad("delivery_limit", "delivery_limit without dead_letter_exchange would drop messages at the limit; set dead_letter_exchange")
		}
		if c.DeliveryLimit > 0 && c.QueueType == QueueClassic && c.nackMode() == NackRequeue {
			bad("delivery_limit", "classic queues with nack_mode=requeue do not count deliveries; use nack_mode=republish or queue_type=quorum")
		}
		if c.DeadLetterExchange != "" && strings.HasPrefix(c.DeadLetterExchange, "amq.") {
			bad("dead_letter_exchange", "names starting with amq. are reserved")
		}
	}
	return errors.Join(errs...)
}

func (c *Config) nackMode() string {
	if c.NackMode != "" {
		return c.NackMode
	}
	if c.QueueType == QueueQuorum {
		return NackRequeue
	}
	return NackRepublish
}

func (c *Config) bindingKeys() []string {
	if c.BindingKeys != nil {
		return c.BindingKeys
	}
	if c.ExchangeKind == KindTopic {
		return []string{"#"}
	}
	return []string{""}
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// tlsFiles are the tls_* fields in the shared form.
func (c *Config) tlsFiles() tlsconf.Files {
	return tlsconf.Files{CAFile: c.TLSCAFile, CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile,
		ServerName: c.TLSServerName, Insecure: c.TLSInsecureSkipVerify}
}

func (c *Config) setTLSFiles(f tlsconf.Files) {
	c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = f.CAFile, f.CertFile, f.KeyFile
	c.TLSServerName, c.TLSInsecureSkipVerify = f.ServerName, f.Insecure
}

// tlsConfig builds the TLS configuration for amqps: TLSConfig as is, or
// one built from the tls_* fields, verifying host by default.
func (c *Config) tlsConfig(host string) (*tls.Config, error) {
	if c.TLSConfig != nil {
		return c.TLSConfig, nil
	}
	t, err := c.tlsFiles().Config(host)
	if err != nil {
		return nil, fmt.Errorf("relay/amqp: %w", err)
	}
	return t, nil
}
