package nats

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-relay/relay/driver"
)

// Defaults of the configuration fields.
const (
	DefaultInFlight        = 64
	DefaultAckWait         = 30 * time.Second
	DefaultFetchWait       = time.Second
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultMaxAckPending is the least max_ack_pending of a consumer the
	// adapter creates (JetStream's own default); the default is the
	// largest window × MembersPerGroup when that is more.
	DefaultMaxAckPending = 1000
	// MembersPerGroup is how many subscribers of a group, each with the
	// same window, a consumer created with the default max_ack_pending
	// serves with full windows: the group's size relay plans for. More
	// members still share the messages, each waiting at times for
	// another's acks (see docs/nats.md, "Groups").
	MembersPerGroup    = 8
	DefaultDialTimeout = 5 * time.Second
	// DefaultPingInterval is how often the client pings the server
	// (ping_interval=); after DefaultMaxPingsOut unanswered pings the
	// connection is declared dead and reconnected, so a silent network is
	// noticed within about (DefaultMaxPingsOut+1) × DefaultPingInterval.
	// nats.go's own default is 2m.
	DefaultPingInterval = 20 * time.Second
	DefaultMaxPingsOut  = 2
	// DefaultPublishBatch is how many asynchronous publishes one SendBatch
	// has outstanding before it waits for their acks (Capabilities().MaxBatch).
	DefaultPublishBatch = 256
)

// Storage is where a stream created by the adapter keeps its messages.
type Storage string

// Storage kinds.
const (
	StorageFile   Storage = "file"
	StorageMemory Storage = "memory"
)

// StreamConfig is what the adapter uses when it creates a topic's stream
// itself (no stream= given). An existing stream is never changed.
type StreamConfig struct {
	// Stream, when set, names a stream that the user manages (stream=):
	// the adapter creates neither it nor changes it; it must exist and
	// hold the topic's subject. The other fields are then unused.
	Stream string
	// Storage is file (default) or memory (storage=).
	Storage Storage
	// Replicas of a created stream (replicas=). Default 1.
	Replicas int
	// MaxAge drops messages older than this (max_age=); 0 keeps them until
	// another limit applies.
	MaxAge time.Duration
	// MaxMsgs keeps at most this many messages (max_msgs=); 0 = no limit.
	MaxMsgs int64
	// MaxBytes keeps at most this many bytes (max_bytes=); 0 = no limit.
	MaxBytes int64
	// DuplicateWindow is how long JetStream remembers message IDs to
	// drop a publish it already stored (duplicate_window=). Default 2m.
	DuplicateWindow time.Duration
}

// SubscriberConfig configures a subscriber.
type SubscriberConfig struct {
	// Group is the group of competing consumers (group=), one durable
	// pull consumer per topic. Required.
	Group string
	// InFlight bounds unsettled messages per subscription (inflight=).
	// Default 0: an adaptive window, starting at DefaultInFlight and
	// growing up to driver.DefaultMaxInFlight, and to half the consumer's
	// max_ack_pending, while the handler keeps up with a backlog (see
	// driver.Options.MaxInFlight).
	InFlight int
	// InFlightBytes bounds the bytes (payload, ID, Key, metadata) of the
	// unsettled messages per subscription (inflight_bytes=, e.g. 64MiB),
	// beside InFlight; 0 takes driver.DefaultInFlightBytes (64 MiB), negative
	// means no byte bound.
	InFlightBytes int64
	// AckWait is how long the server waits for a settlement before it
	// redelivers (ack_wait=). Default 30s; leases of messages in work are
	// extended (+WPI) every AckWait/3. Applies when the adapter creates the
	// consumer; an existing consumer keeps its own.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of a message (max_deliver=); 0 =
	// unlimited. JetStream then stops delivering the message without moving
	// it anywhere; use relay's PoisonQueue middleware for a dead-letter topic.
	MaxDeliver int
	// MaxAckPending bounds the unacknowledged messages of the whole group
	// (max_ack_pending=). Applies when the adapter creates the consumer.
	// Default InFlight × MembersPerGroup (an adaptive window counts as
	// driver.DefaultMaxInFlight, what it may grow to), at least
	// DefaultMaxAckPending.
	// A subscription's window is capped at half the consumer's
	// max_ack_pending (with a warning), so that one member cannot hold the
	// whole group's allowance.
	MaxAckPending int
	// FetchWait is how long one pull request waits for messages
	// (fetch_wait=). Default 1s, at most 10s. An idle subscription sends
	// one pull request per FetchWait (see docs/nats.md).
	FetchWait time.Duration
	// Logger receives transient errors. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem of c at once, or nil. Zero values that
// have a default are valid.
func (c *StreamConfig) Validate() error {
	var errs []error
	if c.Stream != "" && !validName(c.Stream) {
		errs = append(errs, fmt.Errorf("relay/nats: Stream %q is not a valid stream name (no '.', '*', '>', '/', '\\' or whitespace)", c.Stream))
	}
	if c.Storage != "" && c.Storage != StorageFile && c.Storage != StorageMemory {
		errs = append(errs, fmt.Errorf("relay/nats: Storage %q is neither %q nor %q", c.Storage, StorageFile, StorageMemory))
	}
	if c.Replicas < 0 || c.MaxAge < 0 || c.MaxMsgs < 0 || c.MaxBytes < 0 || c.DuplicateWindow < 0 {
		errs = append(errs, errors.New("relay/nats: Replicas, MaxAge, MaxMsgs, MaxBytes and DuplicateWindow must not be negative"))
	}
	if c.MaxAge > 0 && cmp.Or(c.DuplicateWindow, DefaultDuplicateWindow) > c.MaxAge {
		errs = append(errs, fmt.Errorf("relay/nats: DuplicateWindow %v exceeds MaxAge %v (JetStream refuses such a stream)", cmp.Or(c.DuplicateWindow, DefaultDuplicateWindow), c.MaxAge))
	}
	return errors.Join(errs...)
}

func (c *StreamConfig) defaults() {
	c.Storage = cmp.Or(c.Storage, StorageFile)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, DefaultDuplicateWindow)
}

// Validate reports every problem of c at once, or nil. Zero values that
// have a default are valid.
func (c *SubscriberConfig) Validate() error {
	errs := []error{driver.CheckGroup("nats", c.Group)}
	if c.InFlight < 0 || c.MaxDeliver < 0 || c.MaxAckPending < 0 {
		errs = append(errs, errors.New("relay/nats: InFlight, MaxDeliver and MaxAckPending must not be negative"))
	}
	if c.AckWait != 0 && c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("relay/nats: AckWait %v is below 1s", c.AckWait))
	}
	if c.FetchWait != 0 && (c.FetchWait < 10*time.Millisecond || c.FetchWait > 10*time.Second) {
		errs = append(errs, fmt.Errorf("relay/nats: FetchWait %v is outside 10ms..10s", c.FetchWait))
	}
	return errors.Join(errs...)
}
