package redisstream

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-relay/relay/driver"
)

// Defaults of the configuration fields.
const (
	DefaultMaxBytes    = 64 << 20
	DefaultInFlight    = 64
	DefaultBlock       = time.Second
	DefaultClaimIdle   = 30 * time.Second
	DefaultClaimEvery  = 2 * time.Second
	DefaultConsumerTTL = 24 * time.Hour
	DefaultStart       = StartOldest
)

// Start positions of a new consumer group.
const (
	// StartOldest makes a new group read the whole retained stream, so
	// nothing published before the group existed is lost.
	StartOldest = "0"
	// StartNewest makes a new group read only entries added after it was
	// created.
	StartNewest = "$"
)

// HandbackConsumer is the consumer that holds entries handed back to the
// group by a Nack or by a subscription that ended with unsettled messages,
// until another consumer claims them. It never reads.
const HandbackConsumer = "relay-handback"

// minClaimIdle keeps lease extension (every ClaimIdle/3) meaningful.
const minClaimIdle = 30 * time.Millisecond

// maxBulk is Redis's default limit on one string (proto-max-bulk-len).
const maxBulk = 512 << 20

// PublisherConfig configures a publisher. The zero value is usable.
type PublisherConfig struct {
	// Prefix is prepended to the topic to form the stream key (prefix=).
	Prefix string
	// MaxBytes limits payload plus ID, Key and metadata of one message
	// (max_bytes=). Default 64 MiB; at most 512 MiB, Redis's string limit.
	MaxBytes int
	// MaxLen trims the stream to about this many entries on every XADD
	// (maxlen=, MAXLEN ~). 0 = no limit. Trimming drops entries even if a
	// group has not read them yet.
	MaxLen int64
	// MaxAge trims entries older than this on every XADD (maxage=, MINID ~
	// now-MaxAge). 0 = no limit. Exclusive with MaxLen.
	MaxAge time.Duration
}

// Validate reports every problem of c at once, or nil.
func (c *PublisherConfig) Validate() error {
	var errs []error
	if c.MaxBytes < 0 || c.MaxBytes > maxBulk {
		errs = append(errs, fmt.Errorf("relay/redis: MaxBytes %d out of range 1..%d", c.MaxBytes, maxBulk))
	}
	if c.MaxLen < 0 {
		errs = append(errs, fmt.Errorf("relay/redis: MaxLen %d is negative", c.MaxLen))
	}
	if c.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("relay/redis: MaxAge %v is negative", c.MaxAge))
	}
	if c.MaxLen > 0 && c.MaxAge > 0 {
		errs = append(errs, errors.New("relay/redis: MaxLen and MaxAge exclude each other (Redis trims by one criterion)"))
	}
	return errors.Join(errs...)
}

func (c *PublisherConfig) defaults() {
	c.MaxBytes = cmp.Or(c.MaxBytes, DefaultMaxBytes)
}

// SubscriberConfig configures a subscriber.
type SubscriberConfig struct {
	// Group is the consumer group (group=). Required.
	Group string
	// Consumer is the base of this process's consumer names (consumer=).
	// Default "<hostname>-<pid>". It must differ between processes that
	// consume one group at the same time; a process restarted with the
	// same name takes its own pending entries back at once.
	Consumer string
	// Prefix is prepended to the topic to form the stream key (prefix=).
	Prefix string
	// Start is where a group created by this subscriber begins (start=):
	// "0" (default) for the oldest retained entry, "$" for new entries only.
	// It does not move an existing group.
	Start string
	// InFlight bounds unsettled messages per subscription (inflight=).
	// Default 0: an adaptive window, starting at DefaultInFlight and
	// growing up to driver.DefaultMaxInFlight while the handler keeps up
	// with a backlog (see driver.Options.MaxInFlight); XREADGROUP's COUNT
	// is the free part of the window.
	InFlight int
	// InFlightBytes bounds the bytes (payload, ID, Key, metadata) of the
	// unsettled messages per subscription (inflight_bytes=, e.g. 64MiB),
	// beside InFlight; 0 takes driver.DefaultInFlightBytes (64 MiB), negative
	// means no byte bound.
	InFlightBytes int64
	// Block is the longest one XREADGROUP waits for new entries (block=).
	// Default 1s. Close and Nack interrupt the wait with CLIENT UNBLOCK;
	// where that command is not permitted, Block bounds how long they wait.
	Block time.Duration
	// ClaimIdle is how long an entry must be pending without its lease
	// being extended before another consumer takes it over (claim_idle=).
	// Default 30s; leases are extended every ClaimIdle/3.
	ClaimIdle time.Duration
	// ClaimEvery is how often a subscription looks for entries to take
	// over, including those handed back by other consumers (claim_every=).
	// Default 2s.
	ClaimEvery time.Duration
	// ConsumerTTL removes consumers of the group that have no pending
	// entries and have not read for this long (consumer_ttl=), such as
	// those of crashed processes, whose entries were taken over. Checked
	// atomically (a Lua script), so a consumer that holds entries is never
	// removed. Default 24h; negative (consumer_ttl=0 in URLs) disables it.
	ConsumerTTL time.Duration
	// DelayPoll is the longest a subscription's mover of delayed messages
	// (Message.DeliverAt) sleeps between two looks at the stream's delayed
	// set (delay_poll=). It sleeps until the earliest delayed message is
	// due, or DelayPoll if that is sooner: a message published meanwhile
	// with an earlier due time is at most about DelayPoll late. Default
	// 100ms.
	DelayPoll time.Duration
	// Logger receives transient errors. Default slog.Default().
	Logger *slog.Logger
}

func (c *SubscriberConfig) defaults() {
	if c.Consumer == "" {
		c.Consumer = defaultConsumer()
	}
	c.Start = cmp.Or(c.Start, DefaultStart)
	c.Block = cmp.Or(c.Block, DefaultBlock)
	c.ClaimIdle = cmp.Or(c.ClaimIdle, DefaultClaimIdle)
	c.ClaimEvery = cmp.Or(c.ClaimEvery, DefaultClaimEvery)
	c.ConsumerTTL = cmp.Or(c.ConsumerTTL, DefaultConsumerTTL)
	c.DelayPoll = cmp.Or(c.DelayPoll, DefaultDelayPoll)
	c.Logger = cmp.Or(c.Logger, slog.Default())
}

// Validate reports every problem of c at once, or nil. Zero values that
// have a default are valid.
func (c *SubscriberConfig) Validate() error {
	errs := []error{driver.CheckGroup("redis", c.Group)}
	if c.Consumer == HandbackConsumer {
		errs = append(errs, fmt.Errorf("relay/redis: Consumer %q is reserved", HandbackConsumer))
	}
	if c.Start != "" && c.Start != StartOldest && c.Start != StartNewest {
		errs = append(errs, fmt.Errorf("relay/redis: Start %q is neither %q nor %q", c.Start, StartOldest, StartNewest))
	}
	if c.InFlight < 0 {
		errs = append(errs, fmt.Errorf("relay/redis: InFlight %d is negative", c.InFlight))
	}
	if c.Block < 0 {
		errs = append(errs, fmt.Errorf("relay/redis: Block %v is negative", c.Block))
	}
	if c.ClaimIdle < 0 || (c.ClaimIdle > 0 && c.ClaimIdle < minClaimIdle) {
		errs = append(errs, fmt.Errorf("relay/redis: ClaimIdle %v is below %v", c.ClaimIdle, minClaimIdle))
	}
	if c.ClaimEvery < 0 {
		errs = append(errs, fmt.Errorf("relay/redis: ClaimEvery %v is negative", c.ClaimEvery))
	}
	if c.DelayPoll < 0 {
		errs = append(errs, fmt.Errorf("relay/redis: DelayPoll %v is negative", c.DelayPoll))
	}
	return errors.Join(errs...)
}

func defaultConsumer() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "relay"
	}
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}
