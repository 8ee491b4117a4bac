package redislist

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/tlsconf"
	"github.com/go-relay/relay/driver/urlopt"
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
	minBlock        = 10 * time.Millisecond
)

func init() { opener.Register(Scheme) }

// opener is the adapter's relay.Opener and relay.URLChecker: the shared
// helper of package driver around ParseURL and the constructors.
var opener = driver.Opener[Config]{
	Backend: Scheme,
	Parse:   ParseURL,
	NewPublisher: func(ctx context.Context, c Config) (relay.Publisher, error) {
		return NewPublisher(ctx, c)
	},
	NewSubscriber: func(ctx context.Context, c Config) (relay.Subscriber, error) {
		return NewSubscriber(ctx, c)
	},
	Defaults: relay.URLDefaults{EitherSide: true},
}

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

// ParseURL reads u for both sides with the strict reader of package
// urlopt (an unknown or repeated parameter is an error). subscriber adds
// what only a subscriber needs: a group. Every problem is a
// *relay.URLError; several are joined.
func ParseURL(u *url.URL, subscriber bool) (Config, error) {
	p := urlopt.New(u)
	if u.Scheme != Scheme {
		p.Fail("", "scheme %q is not %s://", u.Scheme, Scheme)
	}
	c := Config{Redis: &redis.Options{Addr: urlopt.Address(u, "6379"), ContextTimeoutEnabled: true, DisableIdentity: true}}
	if u.User != nil {
		c.Redis.Username = u.User.Username()
		c.Redis.Password, _ = u.User.Password()
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			p.Fail("path", "%q is not a database number such as /0", u.Path)
		}
		c.Redis.DB = n
	}
	if tf := tlsconf.Read(p); p.Bool("tls", false) || tf.Set() {
		c.Redis.TLSConfig = tf.Build(u.Hostname(), p.Fail)
	}
	c.Prefix = p.String("prefix", DefaultPrefix)
	c.Group = p.Group(subscriber)
	c.InFlight = p.Int("inflight", DefaultInFlight, 1)
	c.InFlightBytes = p.Bytes("inflight_bytes", 0)
	c.Block = p.Duration("block", DefaultBlock)
	c.Lease = p.Duration("lease", DefaultLease)
	switch {
	case c.Lease < minLease:
		p.Fail("lease", "%v is below the minimum %v", c.Lease, minLease)
	case c.Block < minBlock:
		p.Fail("block", "%v is below the minimum %v", c.Block, minBlock)
	case c.Block > c.Lease/2:
		p.Fail("block", "%v is over half the lease (%v): a consumer waiting that long could be taken for dead", c.Block, c.Lease)
	}
	if strings.Contains(c.Group, ":") {
		p.Fail("group", "%q contains ':', which separates the parts of this adapter's key names", c.Group)
	}
	if c.Group == "groups" {
		p.Fail("group", "%q is reserved: it names the key of a topic's group set", c.Group)
	}
	return c, p.Err()
}
