package driver

// The contract between the shared layer and an adapter: what an adapter
// implements (PublishDriver, SubscribeDriver and Receiver, and the
// optional interfaces each may add), the values they exchange (Received,
// Settle) and the Options that tune the shared layer. Everything else in
// this package is the engine that turns a driver into a relay.Publisher
// and a relay.Subscriber, and helpers for adapters. See the package
// documentation for the calling conventions.

import (
	"context"
	"log/slog"
	"time"

	"github.com/go-relay/relay"
)

// PublishDriver is the broker-specific half of a Publisher.
type PublishDriver interface {
	// SendBatch makes one attempt to send msgs to topic and returns once
	// the broker accepted every one of them (nil), or an error. Partial
	// failure is reported as a *relay.PublishError naming the failed
	// messages. The batch is at most Capabilities().MaxBatch long (when
	// non-zero) and passed the limit checks. SendBatch is called
	// concurrently.
	//
	// SendBatch does not retry: it classifies. A failure worth sending
	// again (the connection down, the broker restarting, no answer in
	// time, throttling) is marked with Retryable: as the whole error, when
	// none of the batch was accepted for sure and all of it may be sent
	// again; as the Err of an entry of the *relay.PublishError, for the
	// messages that may be sent again (never mark one whose resending
	// could break an order the driver declares). The Publisher sends
	// exactly the marked messages again, in their order, with its one
	// backoff policy, until they are accepted or ctx ends, and then
	// reports them failed with "relay/<Backend>: <ctx error> (last error:
	// <the last marked error>)", wrapping both. Unmarked failures are
	// reported at once as they are. A message sent again may be stored
	// twice when an attempt's outcome was in doubt (at-least-once), unless
	// the broker deduplicates by ID.
	//
	// SendBatch and the driver's encoders only read the messages: they
	// must not write a message's Metadata map or Payload, since callers
	// may share them between messages and calls (relay.Publisher promises
	// so; the bridge's copies share one map).
	SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error
	Capabilities() relay.Capabilities
	// Close releases the connection. Called once, after every SendBatch
	// returned. It must not wait on the broker for long (Publisher.Close
	// counts on it to keep its time bound).
	Close() error
}

// AsyncSender is optionally implemented by a PublishDriver whose client
// pipelines natively (Kafka's Produce with a promise per record).
// SendBatchAsync hands msgs (one batch within the driver's limits, checked
// already) to the client and returns without waiting for the broker; done
// is called exactly once with what SendBatch would have returned, on any
// goroutine, possibly before SendBatchAsync returns. It may block only on
// the client's own buffer limits, honouring ctx. When ctx ends before the
// broker answered, done must be called promptly with an error that says
// the outcome is unknown, as SendBatch returns it. The Publisher does not
// send again what SendBatchAsync reports failed (Retryable marks are taken
// as they are): a pipelining client retries on its own (franz-go does,
// within its delivery timeout and the ctx). Without AsyncSender,
// Publisher.PublishAsync runs SendBatch on a goroutine of its own, with
// the retries of Publish.
type AsyncSender interface {
	SendBatchAsync(ctx context.Context, topic string, msgs []*relay.Message, done func(error))
}

// WholeSender is optionally implemented by a PublishDriver that splits a
// Publish call into broker batches itself: to pack batches by bytes as
// well as by count, or to send several batches concurrently where the
// broker keeps no order across them. When a driver implements it, the
// Publisher calls SendAll once per Publish call, after every message passed
// the limit checks, instead of calling SendBatch per MaxBatch messages.
//
// SendAll has SendBatch's contract for the whole slice: nil only when the
// broker accepted every message; partial failure as a *relay.PublishError
// naming exactly the messages that were not accepted; ctx honoured. It
// makes one attempt, like SendBatch, and marks what may be sent again
// with Retryable: the Publisher calls SendAll again with exactly those
// messages (in their order) until they are accepted or ctx ends.
type WholeSender interface {
	SendAll(ctx context.Context, topic string, msgs []*relay.Message) error
}

// MessageValidator is optionally implemented by a PublishDriver that has
// limits beyond the generic size check (name charset, encoded size, ...).
// It is called for every message before anything of a Publish call is
// sent, and like SendBatch it only reads the message.
type MessageValidator interface {
	ValidateMessage(topic string, m *relay.Message) error
}

// TopicValidator is optionally implemented by drivers with topic naming rules.
type TopicValidator interface {
	ValidateTopic(topic string) error
}

// GroupCheckDriver is optionally implemented by a PublishDriver; see
// relay.GroupChecker, whose answers CheckGroups gives. A driver whose
// broker keeps what is published for groups created later implements it
// too, returning nil, so that callers know; one whose broker drops such
// messages asks the broker, publishing and creating nothing.
type GroupCheckDriver interface {
	CheckGroups(ctx context.Context, topic string) error
}

// GroupSendDriver is optionally implemented by a PublishDriver whose broker
// can deliver to one group of a topic; see relay.GroupPublisher. Such a
// driver declares Capabilities().PublishToGroup. SendBatchToGroup is
// SendBatch (one attempt, Retryable marks, only reading the messages) to
// that group alone; it never gets a message due later.
type GroupSendDriver interface {
	SendBatchToGroup(ctx context.Context, topic, group string, msgs []*relay.Message) error
}

// DueHolder is optionally implemented by a PublishDriver and by a
// SubscribeDriver of a backend that has no delayed delivery of its own
// but a native NackAfter (Capabilities.NativeDelay) that holds across
// restarts. When HoldsUntilDue reports true:
//
//   - the Publisher sends each message whose DeliverAt is in the future
//     as a copy carrying DeliverAtHeader (the caller's message is not
//     changed) and sends it at once;
//   - each subscription, when it receives a message whose header is in
//     the future, does not deliver it: it nacks it with the time remaining
//     as delay (at most Capabilities.MaxDelay; a longer wait is held
//     again when it comes back), without taking a window slot. A message
//     whose header has passed is delivered without the header, and with
//     its Attempt lowered by the holds this Subscriber made of it, on
//     this delivery and on redeliveries within an hour of DeliverAt
//     (holds made by another process, a competing consumer or before a
//     restart, are not known: Attempt is then higher than the consumer's
//     own deliveries, never lower). A header that does not parse is left in
//     place and the message delivered.
//
// The delay is held by the broker's redelivery timer, so it survives the
// restart of every process; but the message itself sits in the topic
// from the publish on, so a consumer that does not use this package sees
// it at once, and each hold counts as a broker delivery (a backend-side
// redelivery limit counts holds too). The driver declares
// Capabilities.DelayedDelivery (DelayEmulated) itself. Receivers of
// drivers that do not implement DueHolder pay nothing for it.
type DueHolder interface {
	HoldsUntilDue() bool
}

// DeliverAtHeader is the metadata name under which a publisher whose
// driver holds delayed messages until due (DueHolder) carries
// Message.DeliverAt to the subscribers: the time in UTC, RFC 3339 with
// nanoseconds. The name is reserved on such backends: the publisher
// removes it from messages without a delay, and subscriptions remove it
// before delivery.
const DeliverAtHeader = "relay-deliver-at"

// SubscribeDriver is the broker-specific half of a Subscriber.
type SubscribeDriver interface {
	// Subscribe starts a subscription of topic for the driver's group.
	// ctx is the subscription's lifetime.
	Subscribe(ctx context.Context, topic string) (Receiver, error)
	Capabilities() relay.Capabilities
	// Close releases the connection; called once, after every Receiver
	// closed. It must not wait on the broker for long: it comes after the
	// subscriptions' teardown deadline, and Subscriber.Close counts on it
	// to keep its time bound.
	Close() error
}

// Receiver is the broker side of one subscription (one topic, one group).
type Receiver interface {
	// Receive blocks until it has between 1 and max messages or ctx is
	// done. A receiver whose broker call can end with nothing (a long poll
	// that timed out empty) may return no messages and a nil error then:
	// the caller calls again, and counts the call a success (Health clears
	// the error of an earlier failed call), which a call that keeps
	// waiting for messages cannot tell it. Errors other than ctx's are
	// retried by the caller with backoff
	// (the receiver reconnects as needed); an error wrapping relay.ErrClosed
	// ends the subscription. A delivery that cannot be decoded is returned
	// as a message (raw bytes as payload, the problem in metadata), never
	// as an error; messages are never returned together with an error.
	// The caller is done with the returned slice when it calls Receive
	// again, so a receiver may reuse it (not one that implements
	// ReceiveLimiter with more than one call at once: its calls overlap).
	Receive(ctx context.Context, max int) ([]Received, error)
	// Settle applies acks and nacks, in settlement order, with as few
	// broker calls as it can. It is called from one goroutine. The batch
	// slice is reused once Settle returns: keep no reference to it.
	Settle(ctx context.Context, batch []Settle) error
	// Release hands unsettled messages back to the group at once; called
	// when the subscription ends, after the last Settle.
	Release(ctx context.Context, handles []any) error
	// Close ends the broker-side subscription; called last, after Receive
	// returned for good. ctx carries the deadline of the subscription's
	// teardown (Options.CloseTimeout after it began): Close gives up on
	// broker calls when it is done, and returns soon after.
	Close(ctx context.Context) error
}

// Received is one message a Receiver took from the broker.
type Received struct {
	// Msg has ID, Key, Metadata and Payload set; it must not be delivered yet.
	Msg *relay.Message
	// Attempt is the broker's delivery count (1 = first); 0 is taken as 1.
	Attempt int
	// Handle is the adapter's token for settling this message.
	Handle any
	// Position is where the message is kept in the broker, for a backend
	// that has lasting coordinates (relay.Message.Position): a Kafka
	// partition and offset, a stream entry ID or sequence, a row id.
	// Zero otherwise. Setting it must not allocate (an entry ID the
	// driver holds anyway is fine).
	Position relay.Position
}

// Settle is one settlement passed to Receiver.Settle.
type Settle struct {
	Handle any
	Ack    bool
	// Delay before redelivery of a Nack. Non-zero only when the driver
	// declares Capabilities().NativeDelay; otherwise the shared layer holds
	// the message for the delay and then passes a Nack with Delay 0.
	Delay time.Duration
}

// ReceiveLimiter is optionally implemented by a Receiver whose broker
// caps the messages of one receive call and delivers faster with several
// calls in flight (SQS's ReceiveMessage returns at most ten). maxPerCall
// (when positive) bounds the max passed to Receive; concurrent (when above
// one) is how many Receive calls the subscription keeps in flight at once,
// from as many goroutines, each asking for part of the free window, so that
// together they never ask for more than the window holds. A receiver that
// implements it must allow those concurrent Receive calls; the order of
// messages across calls is then not kept, so a receiver that must keep an
// order (a FIFO queue) declares 1. It is called once per subscription.
type ReceiveLimiter interface {
	ReceiveLimits() (maxPerCall, concurrent int)
}

// WindowLimiter is optionally implemented by a Receiver whose broker
// bounds the unsettled messages of the whole group (NATS JetStream's
// max_ack_pending): a positive WindowLimit below Options.InFlight becomes
// the subscription's window, and an adaptive window (Options.MaxInFlight)
// grows no further than it, so that one member of the group cannot hold
// what the others need. It is called once, before the first Receive; the
// receiver says why it limits (a log line) itself.
type WindowLimiter interface {
	WindowLimit() int
}

// Extender is optionally implemented by a Receiver whose broker leases
// messages for a limited time (SQS visibility, Redis idle time). Extend is
// called every Options.ExtendEvery with the handles of every message held
// by the subscription, so that slow work is not redelivered meanwhile.
type Extender interface {
	Extend(ctx context.Context, handles []any) error
}

// Committer is optionally implemented by a Receiver whose Settle only
// records acks and whose broker keeps the group's position apart, moved
// by a call of its own (Kafka's offset commit). After a Settle that held
// an ack the shared layer calls Commit before it frees the batch's window
// slots, so that while commits succeed the window bounds what a crash
// redelivers; with Options.CommitInterval set it leaves the commit to the
// subscription's commit loop instead, which sends one at most every
// interval. A Commit that failed is retried by that loop with backoff
// until one succeeds (however long no more acks come) or the
// subscription ends; the slots are freed meanwhile. Commit must send
// every acked position the broker has not confirmed, so that one success
// covers every earlier failure, and return nil at once when there is
// none. It may be called concurrently with itself and must order its
// calls. It is not called once Close is: Close must commit every acked
// position itself.
type Committer interface {
	Commit(ctx context.Context) error
}

// ProvisionDriver is optionally implemented by a SubscribeDriver; see
// relay.Provisioner.
type ProvisionDriver interface {
	Provision(ctx context.Context, topic string) error
}

// RemoveTopicDriver is optionally implemented by a SubscribeDriver that can
// delete a topic and the subscriber's group state for it from the broker;
// see Subscriber.RemoveTopic.
type RemoveTopicDriver interface {
	RemoveTopic(ctx context.Context, topic string) error
}

// LagDriver is optionally implemented by a SubscribeDriver; see
// relay.LagReporter.
type LagDriver interface {
	Lag(ctx context.Context, topic string) (int64, error)
}

// HistoryDriver is optionally implemented by a SubscribeDriver whose
// broker keeps a topic's messages readable without consuming them; see
// relay.HistoryReader. ReadHistory must change no group's state.
type HistoryDriver interface {
	ReadHistory(ctx context.Context, topic string, w relay.Window, fn func(relay.Stored) error) error
}

// AssignmentDriver is optionally implemented by a SubscribeDriver; see
// relay.AssignmentReporter.
type AssignmentDriver interface {
	Assignment(topic string) (relay.Assignment, error)
}

// Options tune the shared subscription machinery. Zero values take defaults.
type Options struct {
	// InFlight is how many unsettled messages a subscription may hold:
	// the window, or where the window starts when MaxInFlight is above it.
	// Default 64.
	InFlight int
	// MaxInFlight, when above InFlight, makes the window adaptive: it
	// starts at InFlight and doubles, up to MaxInFlight, each time a
	// Receive returns as many messages as it was asked for (the broker has
	// more) while every message delivered before had been settled (the
	// handler was waiting for messages, so the window, not the consumer,
	// set the pace). It never grows past what InFlightBytes holds at the
	// recent message size nor past a WindowLimiter's limit, and it does not
	// shrink. A slow handler keeps messages unsettled, so its window stays
	// where it is. Adapters set it (DefaultMaxInFlight) when the user did
	// not choose a window; see AdaptiveWindow. 0: a fixed window.
	MaxInFlight int
	// CommitInterval delays a Committer receiver's commits so that more
	// acks share one (see Committer). Default 0: commit after each
	// settlement batch, before its window slots come back.
	CommitInterval time.Duration
	// ExtendEvery is the lease-extension period for Extender receivers.
	// Default 0: no extension.
	ExtendEvery time.Duration
	// BrokerTimeout bounds each Settle, Release and Extend call. Default 10s.
	BrokerTimeout time.Duration
	// CloseTimeout bounds the teardown of a subscription once its ctx is
	// done or the subscriber closes: the final settlements (with their
	// retries), the release of unsettled messages and the receiver's Close
	// share this one deadline, whatever BrokerTimeout says. What could not
	// be sent by then is logged; the broker redelivers it after its own
	// timeout. Default DefaultCloseTimeout (5s).
	CloseTimeout time.Duration
	// SettleLinger is how long settlements may wait to fill a batch of
	// SettleBatch before they are sent. When the handler holds nothing
	// else they are sent at once if they hold a quarter of the window or
	// more, and otherwise at most once per SettleLinger: a handler that
	// keeps catching up with a busy stream shares one broker call per
	// SettleLinger. Default 1ms.
	SettleLinger time.Duration
	// SettleBatch is how many pending settlements are sent without
	// lingering (and so, with a fast handler, how many window slots are
	// freed at once for the next Receive). Default half the window, so
	// that the handler works on one half while the other is settled and
	// refilled. A driver whose receive calls cost more than its settle
	// calls may set the whole window, so that a fast handler's acks free
	// the window in one step and Receive asks for all of it; the window
	// then stays whole: while the handler holds messages, Receive is not
	// asked for less than half of it (for up to 20ms), and the slots an
	// adaptive window grows by join the next Receive, not one of their
	// own. At most InFlight.
	SettleBatch int
	// InFlightBytes bounds the bytes (payload, ID, Key and metadata) of
	// the unsettled messages a subscription holds, beside InFlight, so
	// that a large window is safe for large messages. Receive is asked
	// for no more messages than fit by the largest recent message size,
	// never for more than a quarter of the bound's worth in one call, and
	// not at all while the bound is reached; a single message larger
	// than the bound is still delivered (the window never drops below one
	// message), and a batch of messages larger than the ones before it can
	// overshoot the bound by that batch. Until the first message's size
	// is known, Receive is asked for that one message, and the next call
	// waits up to a millisecond (SettleLinger when shorter) for it to be
	// settled, so that a fast handler's windows start whole instead of
	// one message apart. Default DefaultInFlightBytes; negative: no byte
	// bound.
	InFlightBytes int64
	// Logger receives transient errors. Default slog.Default().
	Logger *slog.Logger
	// Group is the group the subscriber was opened for, which
	// Subscriber.Group reports ("" where the topic itself is the group,
	// as on sqs://).
	Group string
}

// DefaultMaxInFlight is the largest an adaptive window grows by default
// (Options.MaxInFlight): a read of a thousand messages is what the client
// loops that go fastest ask for, and more only adds memory.
const DefaultMaxInFlight = 1024

// AdaptiveWindow is an adapter's Options.InFlight and MaxInFlight for the
// window its user configured: a window the user set (inflight > 0) is
// fixed; none (0) starts at the adapter's default and adapts up to
// DefaultMaxInFlight.
func AdaptiveWindow(inflight, adapterDefault int) (start, maxWindow int) {
	if inflight > 0 {
		return inflight, inflight
	}
	return adapterDefault, max(adapterDefault, DefaultMaxInFlight)
}

// WindowFollower is optionally implemented by a Receiver whose broker
// holds the window itself (an AMQP channel's prefetch count): when an
// adaptive window grows (Options.MaxInFlight), WindowGrew is called with
// the new window, from the receive loop between its Receive calls, so
// that the broker lets that many messages be unsettled (it must apply to
// the consumer that is running). An error is logged; the window stays
// grown. Such a broker counts the messages on their way to the receiver
// too, so a Receive seldom returns a full batch: for a follower, a Receive
// that finds the handler idle while its settlements wait for their flush
// also grows the window.
type WindowFollower interface {
	WindowGrew(ctx context.Context, window int) error
}

// DefaultInFlightBytes is the default of Options.InFlightBytes: 64 MiB,
// which lets a window of small messages fill up and bounds what a window
// of large ones holds.
const DefaultInFlightBytes = 64 << 20

// DefaultCloseTimeout is the default of Options.CloseTimeout and of the
// close timeout of NewPublisher.
const DefaultCloseTimeout = 5 * time.Second
