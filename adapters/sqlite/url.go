package sqlite

import (
	"context"
	"net/url"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/urlopt"
	"github.com/go-relay/relay/internal/rowqueue"
)

// Scheme of this backend.
const Scheme = "sqlite"

func init() { opener.Register(Scheme) }

// opener opens sqlite:///path/to/file.db?... (see docs/sqlite.md).
var opener = driver.Opener[urlConfig]{
	Backend: "sqlite",
	Parse:   parseURL,
	NewPublisher: func(ctx context.Context, c urlConfig) (relay.Publisher, error) {
		return NewPublisher(ctx, c.pub)
	},
	NewSubscriber: func(ctx context.Context, c urlConfig) (relay.Subscriber, error) {
		return NewSubscriber(ctx, c.sub)
	},
	Defaults: relay.URLDefaults{SourceWindow: driver.DefaultSourceWindow, EitherSide: true},
}

// urlConfig is everything a sqlite:// URL configures, for both sides.
type urlConfig struct {
	pub PublisherConfig
	sub SubscriberConfig
}

// FilePath is the database file a sqlite:// URL names: what follows
// "sqlite://", without the query, unescaped. sqlite:///var/lib/app/relay.db
// is absolute; sqlite://./relay.db and sqlite://data/relay.db are relative
// to the working directory.
func FilePath(u *url.URL) string { return u.Host + u.Path }

// parseURL reads the file and the parameters of both sides, so that one
// URL serves a publisher and a subscriber: each side ignores the other's
// parameters, whose values are still checked. subscriber adds the
// subscriber's own requirement, a group. Every problem is reported as a
// *relay.URLError (joined).
func parseURL(u *url.URL, subscriber bool) (urlConfig, error) {
	p := urlopt.New(u)
	f := File{
		Path:        FilePath(u),
		BusyTimeout: p.Duration("busy_timeout", DefaultBusyTimeout),
		Synchronous: p.Enum("synchronous", DefaultSynchronous, "full", "normal"),
	}
	switch {
	case u.Opaque != "" || u.User != nil || u.Port() != "":
		p.Fail("", "write the file as sqlite:///absolute/path.db or sqlite://./relative/path.db")
	case f.Path == "":
		p.Fail("", "no database file: write sqlite:///absolute/path.db or sqlite://./relative/path.db")
	case f.Path == ":memory:":
		p.Fail("", "%s", memoryRefused)
	}
	c := urlConfig{pub: PublisherConfig{File: f, MaxBytes: p.Size("max_bytes", DefaultMaxBytes, 1)}}
	if c.pub.MaxBytes > maxBytesLimit {
		p.Fail("max_bytes", "%d exceeds the adapter's limit of %d (512 MiB)", c.pub.MaxBytes, maxBytesLimit)
	}
	rp := rowqueue.ReadParams(p, subscriber, rowqueue.Params{Lease: DefaultLease, Poll: DefaultPoll}, minLease)
	c.sub = SubscriberConfig{File: f, Group: rp.Group, InFlight: rp.InFlight, InFlightBytes: rp.InFlightBytes,
		Lease: rp.Lease, Poll: rp.Poll, MaxAge: p.Duration("max_age", 0)}
	return c, p.Err()
}
