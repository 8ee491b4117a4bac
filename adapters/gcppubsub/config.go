package gcppubsub

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/api/option"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Limits of the Pub/Sub service and defaults of the configuration fields.
const (
	// MaxMessageBytes is Pub/Sub's limit on one message: data, attribute
	// names and values and the ordering key.
	MaxMessageBytes = 10_000_000
	// MaxBatch is the most messages one Publish request may carry.
	MaxBatch = 1000
	// MaxAttributes is the most attributes one message may carry.
	MaxAttributes = 100
	// MaxAttrName and MaxAttrValue bound an attribute's name and value in bytes.
	MaxAttrName  = 256
	MaxAttrValue = 1024
	// MaxOrderingKey bounds an ordering key (a message's Key) in bytes.
	MaxOrderingKey = 1024
	// MaxNackDelay is the longest NackAfter the service holds: its
	// longest ack deadline (Capabilities().MaxDelay).
	MaxNackDelay = 600 * time.Second

	DefaultAckDeadline    = 30 * time.Second
	DefaultInFlight       = 64
	DefaultPullers        = 1
	DefaultReceiveTimeout = 90 * time.Second
)

// Config configures a publisher or a subscriber. Zero values take the
// defaults documented per field; Validate reports every problem at once.
type Config struct {
	// Project is the Google Cloud project of the topics and subscriptions
	// (the URL's host). Required.
	Project string
	// Group is the subscriber's group of competing consumers (group=):
	// one subscription per topic, named by SubscriptionID. Required for a
	// subscriber.
	Group string
	// Endpoint overrides the service's address, host:port (endpoint=):
	// a regional endpoint such as europe-west1-pubsub.googleapis.com:443,
	// or a private one.
	Endpoint string
	// Emulator is the host:port of the Pub/Sub emulator or another fake
	// (emulator=): plaintext gRPC without credentials. The environment
	// variable PUBSUB_EMULATOR_HOST does the same when it is set.
	Emulator string
	// CredentialsFile is a service account key file (credentials=);
	// without it the client finds Application Default Credentials.
	CredentialsFile string
	// CreateTopics creates a topic that does not exist when a message is
	// published to it (create_topics=, default true).
	CreateTopics bool
	// Ordered creates the group's subscriptions with message ordering
	// (ordered=true): messages of one Key are delivered in publish order,
	// with one Pull call in flight per subscription. An existing
	// subscription without ordering is refused.
	Ordered bool
	// AckDeadline is the ack deadline of subscriptions the adapter creates
	// and the lease that extensions renew (ack_deadline=, default 30s;
	// Pub/Sub takes 10s to 600s). Messages in work are extended every
	// min(AckDeadline, 10s)/3, early enough for an existing subscription
	// with the shortest deadline.
	AckDeadline time.Duration
	// MaxDeliveryAttempts, when set (max_delivery_attempts=, 5 to 100),
	// gives subscriptions the adapter creates a dead-letter policy: after
	// that many deliveries a message goes to DeadLetterTopic.
	MaxDeliveryAttempts int
	// DeadLetterTopic is the relay topic that receives dead letters
	// (dead_letter_topic=; default "<subscription>-dlq"), created with a
	// subscription of the same group so that its messages are kept.
	DeadLetterTopic string
	// InFlight bounds unsettled messages per subscription (inflight=).
	// Default 0: an adaptive window, starting at DefaultInFlight and
	// growing up to driver.DefaultMaxInFlight while the handler keeps up
	// with a backlog (see driver.Options.MaxInFlight), the Pull size with
	// it; a set value is fixed. InFlightBytes bounds their bytes
	// (inflight_bytes=, default driver.DefaultInFlightBytes).
	InFlight      int
	InFlightBytes int64
	// Pullers is how many Pull calls a subscription keeps in flight
	// (pullers=, default 1; at most 1 with Ordered). More overlap the
	// service's latency, but each asks for part of the free window, so
	// they can end up splitting it into fragments (a call for most of the
	// window, another for one slot) and pull less than one call would.
	Pullers int
	// ReceiveTimeout bounds one Pull call (receive_timeout=, default 90s).
	// The service answers a Pull that found nothing by itself; a call
	// without an answer by then counts as a failure (Health reports it).
	ReceiveTimeout time.Duration
	// Logger receives transient errors. Default slog.Default().
	Logger *slog.Logger
	// ClientOptions are passed to the Pub/Sub client after those the
	// fields above make (not reachable from a URL).
	ClientOptions []option.ClientOption
}

// Validate reports every problem of c at once, or nil. subscriber adds
// what only a subscriber needs (a group).
func (c Config) Validate(subscriber bool) error {
	var errs []error
	for _, p := range c.problems(subscriber) {
		errs = append(errs, fmt.Errorf("relay/gcppubsub: %s: %s", p.field, p.why))
	}
	return errors.Join(errs...)
}

// problem is one thing wrong with a Config: the field, its URL
// parameter ("" for the URL's host) and why.
type problem struct{ field, param, why string }

func (c Config) problems(subscriber bool) []problem {
	checks := []struct {
		bad bool
		problem
	}{
		{c.Project == "", problem{"Project", "", "required: gcppubsub://PROJECT"}},
		{subscriber && c.Group == "", problem{"Group", "group", driver.GroupRequired}},
		{c.Group != "" && !validChars(c.Group), problem{"Group", "group", "only letters, digits and - _ . ~ + % may appear in a subscription name"}},
		{c.Emulator != "" && (c.Endpoint != "" || c.CredentialsFile != ""), problem{"Emulator", "emulator", "an emulator takes neither an endpoint nor credentials"}},
		{c.AckDeadline != 0 && (c.AckDeadline < time.Second || c.AckDeadline > MaxNackDelay), problem{"AckDeadline", "ack_deadline", "must be within 1s..600s (the service takes 10s..600s)"}},
		{c.MaxDeliveryAttempts != 0 && (c.MaxDeliveryAttempts < 5 || c.MaxDeliveryAttempts > 100), problem{"MaxDeliveryAttempts", "max_delivery_attempts", "must be within 5..100"}},
		{c.DeadLetterTopic != "" && c.MaxDeliveryAttempts == 0, problem{"DeadLetterTopic", "dead_letter_topic", "needs a number of delivery attempts (max_delivery_attempts=)"}},
		{c.DeadLetterTopic != "" && validateTopic(c.DeadLetterTopic) != nil, problem{"DeadLetterTopic", "dead_letter_topic", "not a Pub/Sub topic ID (3-255 letters, digits and - _ . ~ + %, starting with a letter)"}},
		{c.InFlight < 0 || c.Pullers < 0, problem{"InFlight", "inflight", "InFlight and Pullers must not be negative"}},
		{c.Ordered && c.Pullers > 1, problem{"Pullers", "pullers", "an ordered subscription keeps one Pull call in flight"}},
		{c.ReceiveTimeout != 0 && c.ReceiveTimeout < time.Second, problem{"ReceiveTimeout", "receive_timeout", "must be at least 1s"}},
	}
	var out []problem
	for _, ch := range checks {
		if ch.bad {
			out = append(out, ch.problem)
		}
	}
	return out
}

func (c *Config) defaults() {
	if c.AckDeadline == 0 {
		c.AckDeadline = DefaultAckDeadline
	}
	if c.Pullers == 0 {
		c.Pullers = DefaultPullers
	}
	if c.Ordered {
		c.Pullers = 1
	}
	if c.ReceiveTimeout == 0 {
		c.ReceiveTimeout = DefaultReceiveTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// extendEvery is how often messages in work get their lease renewed: a
// third of the shortest deadline they can have (an existing subscription
// may have Pub/Sub's minimum, 10s, whatever AckDeadline says).
func (c *Config) extendEvery() time.Duration { return min(c.AckDeadline, 10*time.Second) / 3 }

// capabilities is the capability row under c.
func capabilities(c Config) relay.Capabilities {
	caps := relay.Capabilities{
		Backend:      "gcppubsub",
		Durable:      true,
		CrossProcess: true,
		Ordering:     relay.OrderNone,
		NativeDelay:  true,
		MaxDelay:     MaxNackDelay,
		// Held by the subscriptions with the native NackAfter until due:
		// see driver.DueHolder.
		DelayedDelivery:   relay.DelayEmulated,
		NativeDeadLetter:  true,
		AttemptFromBroker: c.MaxDeliveryAttempts > 0,
		MaxMessageBytes:   MaxMessageBytes,
		// Data, attributes and ordering key, packed metadata included.
		MaxMessageBytesSetBy: "the Pub/Sub service (10 MB per message)",
		MaxBatch:             MaxBatch,
		RetainedBeforeGroup:  "dropped unless the group's subscription exists (Provision or an earlier Subscribe): Pub/Sub keeps messages for existing subscriptions only",
	}
	if c.Ordered {
		caps.Ordering = relay.OrderPerKey
	}
	return caps
}
