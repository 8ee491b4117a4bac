package sqlite

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
)

// Defaults of the configuration fields.
const (
	DefaultBusyTimeout = 5 * time.Second
	DefaultSynchronous = "full"
	DefaultMaxBytes    = 64 << 20
	DefaultInFlight    = 64
	DefaultLease       = 30 * time.Second
	DefaultPoll        = 100 * time.Millisecond
)

// maxBytesLimit keeps a message well below SQLite's default limit of a
// value (1e9 bytes); the whole row passes through memory on both sides.
const maxBytesLimit = 512 << 20

// minLease keeps lease extension (every Lease/3) meaningful.
const minLease = 300 * time.Millisecond

// maxBatch is how many messages one publish transaction carries.
const maxBatch = 1000

// File is how a process opens the database file. Every publisher and
// subscriber of one file in a process shares one handle (one writing
// connection, a pool of reading ones, the wake-ups of its subscriptions),
// so they must agree on BusyTimeout and Synchronous.
type File struct {
	// Path of the database file, absolute or relative to the working
	// directory; created with relay's tables when missing (its directory
	// must exist). ":memory:" is refused: see the package doc.
	Path string
	// BusyTimeout is how long a statement waits for another process's
	// write to finish (busy_timeout=). Default 5s. A wait that runs out
	// is retried by the shared layer with backoff.
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous setting in WAL mode
	// (synchronous=): "full" (default) makes each commit durable across a
	// power loss; "normal" survives a crash of the process but may lose
	// the latest commits to a power loss or OS crash, and is faster.
	Synchronous string
}

func (f *File) validate() []error {
	var errs []error
	switch {
	case f.Path == "":
		errs = append(errs, errors.New("relay/sqlite: Path is required: the database file"))
	case f.Path == ":memory:":
		errs = append(errs, fmt.Errorf("relay/sqlite: Path %q: %s", f.Path, memoryRefused))
	}
	if f.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("relay/sqlite: BusyTimeout %v is negative", f.BusyTimeout))
	}
	if s := f.Synchronous; s != "" && s != "full" && s != "normal" {
		errs = append(errs, fmt.Errorf("relay/sqlite: Synchronous %q is not full or normal", s))
	}
	return errs
}

// memoryRefused says why a private in-memory database is no backend.
const memoryRefused = "want a file path: an in-memory database lives in one connection, and relay uses several (use mem:// for an in-process backend)"

func (f *File) defaults() {
	f.BusyTimeout = cmp.Or(f.BusyTimeout, DefaultBusyTimeout)
	f.Synchronous = cmp.Or(f.Synchronous, DefaultSynchronous)
}

// PublisherConfig configures a publisher.
type PublisherConfig struct {
	File
	// MaxBytes limits payload plus ID, Key and metadata of one message
	// (max_bytes=). Default 64 MiB; at most 512 MiB.
	MaxBytes int
}

// Validate reports every problem of c at once, or nil.
func (c *PublisherConfig) Validate() error {
	errs := c.File.validate()
	if c.MaxBytes < 0 || c.MaxBytes > maxBytesLimit {
		errs = append(errs, fmt.Errorf("relay/sqlite: MaxBytes %d out of range 1..%d", c.MaxBytes, maxBytesLimit))
	}
	return errors.Join(errs...)
}

func (c *PublisherConfig) defaults() {
	c.File.defaults()
	c.MaxBytes = cmp.Or(c.MaxBytes, DefaultMaxBytes)
}

// SubscriberConfig configures a subscriber.
type SubscriberConfig struct {
	File
	// Group is the group of competing consumers (group=). Required.
	Group string
	// InFlight bounds unsettled messages per subscription (inflight=), and
	// so how many rows one claim takes. Default 0: an adaptive window,
	// starting at DefaultInFlight and growing up to driver.DefaultMaxInFlight
	// while the handler keeps up with a backlog (see
	// driver.Options.MaxInFlight).
	InFlight int
	// InFlightBytes bounds the bytes (payload, ID, Key, metadata) of the
	// unsettled messages per subscription (inflight_bytes=, e.g. 64MiB),
	// beside InFlight; 0 takes driver.DefaultInFlightBytes (64 MiB),
	// negative means no byte bound.
	InFlightBytes int64
	// Lease is how long a claimed message stays invisible to the rest of
	// the group (lease=). It is extended every Lease/3 while the message
	// is held, so only a crashed or hung consumer's messages come back
	// after it. Default 30s.
	Lease time.Duration
	// Poll is how often an idle subscription looks for claimable rows
	// (poll=): what other processes published, and rows whose lease ran
	// out. Publishes, nacks and releases of this process wake it at once.
	// Default 100ms.
	Poll time.Duration
	// MaxAge, when set, deletes messages older than it from the topic,
	// acknowledged or not (max_age=): swept by the topic's running
	// subscriptions, at most every MaxAge/10 (between 1s and 1m).
	// Default 0: a message is kept until every group acknowledged it.
	MaxAge time.Duration
	// Logger receives transient errors. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem of c at once, or nil. Zero values that
// have a default are valid.
func (c *SubscriberConfig) Validate() error {
	errs := append(c.File.validate(), driver.CheckGroup("sqlite", c.Group))
	if why := rowqueue.ValidText(c.Group); why != "" {
		errs = append(errs, fmt.Errorf("relay/sqlite: Group %.40q %s", c.Group, why))
	}
	if c.InFlight < 0 {
		errs = append(errs, fmt.Errorf("relay/sqlite: InFlight %d is negative", c.InFlight))
	}
	if c.Lease < 0 || (c.Lease > 0 && c.Lease < minLease) {
		errs = append(errs, fmt.Errorf("relay/sqlite: Lease %v is below %v", c.Lease, minLease))
	}
	if c.Poll < 0 || c.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("relay/sqlite: Poll %v or MaxAge %v is negative", c.Poll, c.MaxAge))
	}
	return errors.Join(errs...)
}

func (c *SubscriberConfig) defaults() {
	c.File.defaults()
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.Poll = cmp.Or(c.Poll, DefaultPoll)
	c.Logger = cmp.Or(c.Logger, slog.Default())
}
