package relay

import (
	"context"
	"time"
)

// Publisher sends messages to topics. Implementations are safe for
// concurrent use.
type Publisher interface {
	// Publish returns nil only when every message is accepted by the broker
	// (confirmed, acknowledged or replicated as configured). It honours ctx.
	// Batches use the broker's batch API. Limits are checked before anything
	// is sent (*LimitError). When some messages of a batch fail, the error is
	// a *PublishError that names them. After Close it returns ErrClosed.
	//
	// A message whose ID is "" gets a fresh UUIDv7, written into the
	// caller's Message (m.ID) before anything is sent, so the caller can
	// read the assigned ID once Publish returns; subscribers receive the
	// message with that ID. This holds on every backend. Publish writes
	// nothing else of the caller's messages: it only reads their Payload
	// and Metadata, during the call and after it (a Publisher may keep
	// them until the broker answered), so messages may share a Metadata
	// map or a payload, also across concurrent calls.
	Publish(ctx context.Context, topic string, msgs ...*Message) error
	// Close waits for Publish calls in progress, then releases the
	// connection. It is idempotent and bounded in time: Publish calls still
	// running after the close timeout (5s for the adapters of this module)
	// are cancelled, and Close returns within twice that, also when the
	// broker stopped answering.
	Close() error
}

// AsyncPublisher is implemented by publishers that let one goroutine keep
// many publishes in flight (every publisher of this module), so that a
// producer loop or a bridge is not bound by one broker round trip per call.
type AsyncPublisher interface {
	// PublishAsync checks msgs as Publish does, hands them to the client
	// and returns without waiting for the broker. done is then called
	// exactly once with the error Publish would have returned for the same
	// call (nil: every message accepted by the broker). done may run on
	// any goroutine, also before PublishAsync returns, and must not block
	// for long: on some backends it runs on the client's own goroutine.
	//
	// What fails before anything is sent is returned by PublishAsync
	// itself and done is not called: ErrClosed after Close, an invalid
	// topic, a *LimitError, ctx already done. PublishAsync blocks while
	// the publisher's limit of publishes in flight is reached (memory is
	// bounded), until one completes or ctx ends (then ctx's error is
	// returned and done is not called). ctx also bounds the publish itself,
	// as it does for Publish: cancel it only when the outcome no longer
	// matters.
	//
	// Messages of one call keep the order Publish keeps. Between calls in
	// flight at the same time, order is kept only where the backend
	// pipelines natively (Kafka: per partition, by the idempotent
	// producer); elsewhere, wait for done before publishing what must come
	// after. The messages must not be modified until done is called.
	// Publisher.Close waits for publishes in flight as it waits for Publish
	// calls, and every done has been called when it returns.
	PublishAsync(ctx context.Context, topic string, msgs []*Message, done func(error)) error
}

// Subscriber receives the messages of topics for the one group it was
// opened for. Implementations are safe for concurrent use.
type Subscriber interface {
	// Subscribe delivers the messages of topic for this subscriber's group
	// until ctx is done or Close. Each (topic, group) subscription is
	// independent.
	//
	// The subscription ends when ctx is done or the subscriber closes. The
	// channel is closed last, and a closed channel means: every settlement
	// made before the subscription ended has been sent to the broker (or
	// failed after retries and was logged), and every unsettled message has
	// been released to the group, so a new subscription of the group
	// receives it at once (a message waiting out an emulated NackAfter is
	// released too; a native delay keeps holding, see Message.NackAfter).
	// Settling a message that was still unsettled then returns
	// ErrSubscriptionEnded and does nothing else.
	//
	// On offset-based backends (Kafka) the group keeps a committed
	// position, not per-message acks: messages acked after an unsettled one
	// of the same partition are delivered to the group again. Such backends
	// declare Capabilities.AckedAfterUnsettledRedelivered.
	Subscribe(ctx context.Context, topic string) (<-chan *Message, error)
	// Close ends every subscription, closes their channels before it
	// returns and releases unsettled messages. It is idempotent and bounded
	// in time: each subscription's teardown (final settlements, release,
	// closing its broker side) has one deadline of the close timeout (5s
	// for the adapters of this module), and Close returns within twice
	// that, also when the broker stopped answering; what could not be sent
	// is logged, and the broker redelivers it after its own timeout.
	Close() error
}

// Provisioner is implemented by subscribers of durable backends. Provision
// creates topic and this subscriber's group (queue, binding, consumer group)
// so that messages published afterwards are kept for the group even before
// its first Subscribe. It is idempotent.
type Provisioner interface {
	Provision(ctx context.Context, topic string) error
}

// Ordering says which messages a backend delivers in publish order.
type Ordering string

const (
	// OrderNone: no order is promised.
	OrderNone Ordering = "none"
	// OrderPerKey: messages with the same Key are delivered in publish order
	// to a subscription (Kafka partition, SQS FIFO group).
	OrderPerKey Ordering = "key"
	// OrderPerTopic: all messages of a topic are delivered in publish order
	// (one Redis stream, one AMQP queue), while no redelivery intervenes.
	OrderPerTopic Ordering = "topic"
)

// DelayKind says how a backend keeps a message published with a
// Message.DeliverAt in the future.
type DelayKind string

const (
	// DelayNone: delayed delivery is not supported.
	DelayNone DelayKind = ""
	// DelayNative: the broker itself holds the message until it is due
	// (SQS DelaySeconds, a PostgreSQL visibility time, ...).
	DelayNative DelayKind = "native"
	// DelayEmulated: the adapter parks the message in the broker (a Redis
	// sorted set, Kafka delay topics, ...) and a loop of the adapter's
	// subscribers moves it to its topic when due. Durable as the broker
	// is, but it is moved only while some subscriber of the topic runs.
	DelayEmulated DelayKind = "emulated"
)

// Capabilities is what a backend declares it can do, so that the router, the
// bridge and the conformance suite can emulate what is missing or refuse
// loudly. Zero values mean "no" or "no limit" as documented per field.
type Capabilities struct {
	Backend string // "memory", "redis", "amqp", "kafka", "sqs", "sns"
	// Durable: messages survive the publishing and consuming processes.
	Durable bool
	// CrossProcess: other processes can publish to and consume from it.
	CrossProcess bool
	Ordering     Ordering
	// NativeDelay: NackAfter uses the broker's own delay; MaxDelay bounds it
	// (0 = unbounded). Without it the adapter holds the message leased.
	NativeDelay bool
	MaxDelay    time.Duration
	// DelayedDelivery is how the backend honours a Message.DeliverAt in the
	// future: DelayNative (the broker holds the message), DelayEmulated
	// (the adapter keeps it in the broker, in a place of its own, and moves
	// it when due: documented per adapter), or DelayNone (Publish fails
	// with ErrDelayUnsupported). MaxDeliverDelay bounds how far ahead
	// DeliverAt may be (0 = unbounded); beyond it Publish fails with a
	// *LimitError.
	DelayedDelivery DelayKind
	MaxDeliverDelay time.Duration
	// NativeDeadLetter: the broker can move a message after N deliveries.
	NativeDeadLetter bool
	// AttemptFromBroker: Attempt comes from a broker delivery counter and
	// survives consumer restarts; otherwise it is counted in process.
	AttemptFromBroker bool
	// Replay: a group can be started from an old position (Kafka offsets).
	Replay bool
	// MaxMessageBytes bounds payload plus encoded metadata (0 = none).
	MaxMessageBytes int
	// MaxMetadataKeys bounds len(Metadata) (0 = none; adapters pack
	// overflow where they can, so most declare 0).
	MaxMetadataKeys int
	// MaxBatch is how many messages one broker call carries.
	MaxBatch int
	// AckedAfterUnsettledRedelivered: the group keeps a committed position
	// per partition rather than per-message acks (Kafka), so when a
	// subscription ends with a message unsettled, the messages of the same
	// partition acked after it are delivered to the group again along with
	// it. When false, an acked message is never delivered again because a
	// subscription ended.
	AckedAfterUnsettledRedelivered bool
	// DeduplicatesByID: the broker stores a message published again with an
	// ID it has seen within a window (documented per adapter) only once,
	// and the repeated Publish returns nil: NATS JetStream's duplicate
	// window. Two different messages with one ID collapse the same way.
	// It does not replace Dedup: past the window, and for redeliveries, a
	// consumer still sees a message twice.
	DeduplicatesByID bool
	// RetainedBeforeGroup describes what happens to messages published
	// before a group exists (documented in prose, e.g. "dropped",
	// "kept from the oldest retained offset").
	RetainedBeforeGroup string
}

// CapabilityReporter is implemented by publishers and subscribers that
// declare their capabilities (every adapter of this module does).
type CapabilityReporter interface {
	Capabilities() Capabilities
}

// HealthChecker is implemented by publishers and subscribers that can tell
// whether their broker connection is usable (every adapter of this module).
// Health returns nil when connected and an error saying why not otherwise;
// it does not block on the network. The bridge's /readyz is built on it.
type HealthChecker interface {
	Health() error
}

// LagReporter is implemented by subscribers that can ask their broker how
// many messages of topic the subscriber's group has not yet acknowledged:
// Kafka consumer lag, stream entries not yet delivered or still pending,
// queue depth. What exactly is counted is each adapter's to document. Lag
// may make a broker call; ctx bounds it. It returns an error wrapping
// ErrNotSupported when the backend cannot tell.
type LagReporter interface {
	Lag(ctx context.Context, topic string) (int64, error)
}
