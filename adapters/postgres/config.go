package postgres

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
)

// Defaults of the configuration fields.
const (
	DefaultSchema   = "relay"
	DefaultMaxBytes = 64 << 20
	DefaultInFlight = 64
	DefaultLease    = 30 * time.Second
	DefaultPoll     = time.Second
	// DefaultPingInterval is the LISTEN connection's keepalive.
	DefaultPingInterval = 10 * time.Second
)

// minPingInterval keeps the keepalive from flooding the server.
const minPingInterval = 100 * time.Millisecond

// maxBytesLimit stays well below PostgreSQL's 1 GB field limit and the
// protocol's message size.
const maxBytesLimit = 512 << 20

// minLease keeps lease extension (every Lease/3) meaningful.
const minLease = 300 * time.Millisecond

// maxBatch is how many messages one publish transaction carries.
const maxBatch = 1000

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,56}$`)

func checkSchema(s string) error {
	if !schemaName.MatchString(s) {
		return fmt.Errorf("relay/postgres: schema %q is not a lower-case SQL identifier (letters, digits, _; at most 57 bytes, so that the notification channel relay_<schema> is a valid name)", s)
	}
	return nil
}

// PublisherConfig configures a publisher. The zero value is usable.
type PublisherConfig struct {
	// Schema holds relay's tables (schema=). Default "relay".
	Schema string
	// MaxBytes limits payload plus ID, Key and metadata of one message
	// (max_bytes=). Default 64 MiB; at most 512 MiB.
	MaxBytes int
}

// Validate reports every problem of c at once, or nil.
func (c *PublisherConfig) Validate() error {
	var errs []error
	if c.Schema != "" {
		errs = append(errs, checkSchema(c.Schema))
	}
	if c.MaxBytes < 0 || c.MaxBytes > maxBytesLimit {
		errs = append(errs, fmt.Errorf("relay/postgres: MaxBytes %d out of range 1..%d", c.MaxBytes, maxBytesLimit))
	}
	return errors.Join(errs...)
}

func (c *PublisherConfig) defaults() {
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.MaxBytes = cmp.Or(c.MaxBytes, DefaultMaxBytes)
}

// SubscriberConfig configures a subscriber.
type SubscriberConfig struct {
	// Group is the group of competing consumers (group=). Required.
	Group string
	// Schema holds relay's tables (schema=). Default "relay".
	Schema string
	// InFlight bounds unsettled messages per subscription (inflight=), and
	// so how many rows one claim takes. Default 0: an adaptive window,
	// starting at DefaultInFlight and growing up to driver.DefaultMaxInFlight
	// while the handler keeps up with a backlog (see
	// driver.Options.MaxInFlight).
	InFlight int
	// InFlightBytes bounds the bytes (payload, ID, Key, metadata) of the
	// unsettled messages per subscription (inflight_bytes=, e.g. 64MiB),
	// beside InFlight; 0 takes driver.DefaultInFlightBytes (64 MiB), negative
	// means no byte bound.
	InFlightBytes int64
	// Lease is how long a claimed message stays invisible to the rest of
	// the group (lease=). The lease is extended every Lease/3 while the
	// message is held, so only a crashed or hung consumer's messages come
	// back after it. Default 30s.
	Lease time.Duration
	// Poll is the fallback period for looking for claimable rows when no
	// notification arrives (poll=): rows whose lease expired, or a lost
	// notification. New messages wake the subscription at once through
	// LISTEN/NOTIFY. Default 1s.
	Poll time.Duration
	// PingInterval is the keepalive of the LISTEN connection
	// (ping_interval=): after this long without a notification it sends a
	// ping, and a ping unanswered for as long again counts the connection
	// as lost (Health reports it; it is opened again). It bounds how long a
	// silent network (packets dropped, no reset) goes unnoticed: about
	// twice PingInterval. Default 10s.
	PingInterval time.Duration
	// Logger receives transient errors. Default slog.Default().
	Logger *slog.Logger
}

func (c *SubscriberConfig) defaults() {
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.Poll = cmp.Or(c.Poll, DefaultPoll)
	c.PingInterval = cmp.Or(c.PingInterval, DefaultPingInterval)
	c.Logger = cmp.Or(c.Logger, slog.Default())
}

// Validate reports every problem of c at once, or nil. Zero values that
// have a default are valid.
func (c *SubscriberConfig) Validate() error {
	errs := []error{driver.CheckGroup("postgres", c.Group)}
	if why := rowqueue.ValidText(c.Group); why != "" {
		errs = append(errs, fmt.Errorf("relay/postgres: Group %.40q %s", c.Group, why))
	}
	if c.Schema != "" {
		errs = append(errs, checkSchema(c.Schema))
	}
	if c.InFlight < 0 {
		errs = append(errs, fmt.Errorf("relay/postgres: InFlight %d is negative", c.InFlight))
	}
	if c.Lease < 0 || (c.Lease > 0 && c.Lease < minLease) {
		errs = append(errs, fmt.Errorf("relay/postgres: Lease %v is below %v", c.Lease, minLease))
	}
	if c.Poll < 0 {
		errs = append(errs, fmt.Errorf("relay/postgres: Poll %v is negative", c.Poll))
	}
	if c.PingInterval != 0 && c.PingInterval < minPingInterval {
		errs = append(errs, fmt.Errorf("relay/postgres: PingInterval %v is below the minimum of %v", c.PingInterval, minPingInterval))
	}
	return errors.Join(errs...)
}
