package redislist

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Scheme is the URL scheme this adapter registers.
const Scheme = "redislist"

// Defaults of the URL parameters.
const (
	DefaultPrefix   = "relay:list:"
	DefaultInFlight = 64
	DefaultBlock    = 5 * time.Second
	DefaultLease    = 30 * time.Second
	minLease        = time.Second
)

func init() { relay.Register(Scheme, opener{}) }

// Config is everything a redislist:// URL configures, for both sides: one
// URL serves a publisher (which ignores group, inflight, block and lease)
// and a subscriber.
type Config struct {
	Redis         *redis.Options
	Prefix        string        // prefix= : key prefix
	Group         string        // group= : the subscriber's group (required to subscribe)
	InFlight      int           // inflight= : unsettled messages per subscription
	InFlightBytes int64         // inflight_bytes= : their bytes (0: the driver's default, 64 MiB)
	Block         time.Duration // block= : how long one BLMOVE waits for a message
	Lease         time.Duration // lease= : TTL of a consumer's owner key
}

// params is a strict reader of a URL's query: every parameter must be
// read once, a parameter left unread is reported as unknown.
type params struct {
	u    *url.URL
	q    url.Values
	seen map[string]bool
	errs []error
}

func (p *params) fail(name, format string, a ...any) {
	p.errs = append(p.errs, &relay.URLError{URL: relay.Redact(p.u.String()), Param: name, Reason: fmt.Sprintf(format, a...)})
}

func (p *params) str(name, def string) string {
	p.seen[name] = true
	vs, ok := p.q[name]
	if !ok {
		return def
	}
	if len(vs) > 1 {
		p.fail(name, "given %d times; give it once", len(vs))
	}
	return vs[0]
}

func (p *params) positiveInt(name string, def int) int {
	s := p.str(name, "")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		p.fail(name, "want a positive integer, got %q", s)
		return def
	}
	return n
}

func (p *params) bytes(name string) int64 {
	s := p.str(name, "")
	if s == "" {
		return 0
	}
	n, err := driver.ParseBytes(s)
	if err != nil {
		p.fail(name, "%v", err)
		return 0
	}
	return n
}

func (p *params) duration(name string, def, min time.Duration) time.Duration {
	s := p.str(name, "")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < min {
		p.fail(name, "want a duration of at least %v such as 5s, got %q", min, s)
		return def
	}
	return d
}

// ParseURL reads u for both sides. subscriber adds what only a subscriber
// needs: a group. Every problem is a *relay.URLError; several are joined.
func ParseURL(u *url.URL, subscriber bool) (Config, error) {
	p := &params{u: u, q: u.Query(), seen: map[string]bool{}}
	if u.Scheme != Scheme {
		p.fail("", "scheme %q is not %s://", u.Scheme, Scheme)
	}
	c := Config{Redis: &redis.Options{Addr: u.Host, ContextTimeoutEnabled: true, DisableIdentity: true}}
	if u.Port() == "" {
		host := u.Hostname()
		if host == "" {
			host = "127.0.0.1"
		}
		c.Redis.Addr = net.JoinHostPort(host, "6379")
	}
	if u.User != nil {
		c.Redis.Username = u.User.Username()
		c.Redis.Password, _ = u.User.Password()
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			p.fail("", "path %q is not a database number such as /0", u.Path)
		}
		c.Redis.DB = n
	}
	c.Prefix = p.str("prefix", DefaultPrefix)
	c.Group = p.str("group", "")
	c.InFlight = p.positiveInt("inflight", DefaultInFlight)
	c.InFlightBytes = p.bytes("inflight_bytes")
	c.Block = p.duration("block", DefaultBlock, 10*time.Millisecond)
	c.Lease = p.duration("lease", DefaultLease, minLease)
	if c.Block > c.Lease/2 {
		p.fail("block", "%v is over half the lease (%v): a consumer waiting that long could be taken for dead", c.Block, c.Lease)
	}
	if subscriber && c.Group == "" {
		p.fail("group", "required: the name of this subscriber's group of competing consumers")
	}
	if strings.Contains(c.Group, ":") {
		p.fail("group", "%q contains ':', which separates the parts of this adapter's key names", c.Group)
	}
	if c.Group == "groups" {
		p.fail("group", "%q is reserved: it names the key of a topic's group set", c.Group)
	}
	for name := range p.q {
		if !p.seen[name] {
			p.fail(name, "unknown parameter (known: block, group, inflight, inflight_bytes, lease, prefix)")
		}
	}
	return c, errors.Join(p.errs...)
}

type opener struct{}

// CheckURL implements relay.URLChecker.
func (opener) CheckURL(u *url.URL) error {
	_, err := ParseURL(u, false)
	return err
}

// CheckSubscriberURL implements relay.URLChecker.
func (opener) CheckSubscriberURL(u *url.URL) error {
	_, err := ParseURL(u, true)
	return err
}

// OpenPublisher implements relay.Opener.
func (opener) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	c, err := ParseURL(u, false)
	if err != nil {
		return nil, err
	}
	p, err := NewPublisher(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("relay/redislist: %s: %w", relay.Redact(u.String()), err)
	}
	return p, nil
}

// OpenSubscriber implements relay.Opener.
func (opener) OpenSubscriber(ctx context.Context, u *url.URL) (relay.Subscriber, error) {
	c, err := ParseURL(u, true)
	if err != nil {
		return nil, err
	}
	s, err := NewSubscriber(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("relay/redislist: %s: %w", relay.Redact(u.String()), err)
	}
	return s, nil
}
