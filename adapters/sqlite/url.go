package sqlite

import (
	"context"
	"fmt"
	"net/url"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/urlopt"
	"github.com/go-relay/relay/internal/rowqueue"
)

// Scheme of this backend.
const Scheme = "sqlite"

func init() { relay.Register(Scheme, opener{}) }

type opener struct{}

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
	c.sub = SubscriberConfig{
		File:          f,
		Group:         p.String("group", ""),
		InFlight:      p.Int("inflight", DefaultInFlight, 1),
		InFlightBytes: p.Bytes("inflight_bytes", 0),
		Lease:         p.Duration("lease", DefaultLease),
		Poll:          p.Duration("poll", DefaultPoll),
		MaxAge:        p.Duration("max_age", 0),
	}
	if subscriber && c.sub.Group == "" {
		p.Fail("group", "required: the name of this subscriber's group of competing consumers")
	}
	if why := rowqueue.ValidText(c.sub.Group); why != "" {
		p.Fail("group", "%s", why)
	}
	if c.sub.Lease < minLease {
		p.Fail("lease", "must be at least %v", minLease)
	}
	if c.sub.Poll <= 0 {
		p.Fail("poll", "must be positive")
	}
	return c, p.Err()
}

// CheckURL implements relay.URLChecker.
func (opener) CheckURL(u *url.URL) error {
	_, err := parseURL(u, false)
	return err
}

// CheckSubscriberURL implements relay.URLChecker.
func (opener) CheckSubscriberURL(u *url.URL) error {
	_, err := parseURL(u, true)
	return err
}

// OpenPublisher opens sqlite://PATH?... (see docs/sqlite.md).
func (opener) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	c, err := parseURL(u, false)
	if err != nil {
		return nil, err
	}
	pub, err := NewPublisher(ctx, c.pub)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u.Redacted(), err)
	}
	return pub, nil
}

// OpenSubscriber opens sqlite://PATH?group=G&... (see docs/sqlite.md).
func (opener) OpenSubscriber(ctx context.Context, u *url.URL) (relay.Subscriber, error) {
	c, err := parseURL(u, true)
	if err != nil {
		return nil, err
	}
	sub, err := NewSubscriber(ctx, c.sub)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u.Redacted(), err)
	}
	return sub, nil
}
