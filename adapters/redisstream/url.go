package redisstream

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

// Schemes of this backend.
const (
	Scheme    = "redis"
	SchemeTLS = "rediss"
)

func init() { opener.Register(Scheme, SchemeTLS) }

// opener opens redis://[user:pass@]host:port/DB?... and rediss:// (see
// docs/redis.md).
var opener = driver.Opener[urlConfig]{
	Backend: "redis",
	Parse:   parseURL,
	Connect: func(_ context.Context, c *urlConfig) error {
		c.client = redis.NewClient(c.opts)
		return nil
	},
	Disconnect: func(c urlConfig) { _ = c.client.Close() },
	NewPublisher: func(ctx context.Context, c urlConfig) (relay.Publisher, error) {
		return newPublisher(ctx, c.client, c.pub, true)
	},
	NewSubscriber: func(ctx context.Context, c urlConfig) (relay.Subscriber, error) {
		return newSubscriber(ctx, c.client, c.sub, true)
	},
	Defaults: relay.URLDefaults{SourceWindow: driver.DefaultSourceWindow, EitherSide: true},
}

// urlConfig is everything a redis:// URL configures, for both sides.
type urlConfig struct {
	opts   *redis.Options
	pub    PublisherConfig
	sub    SubscriberConfig
	client *redis.Client // set by opener.Connect
}

// parseURL reads the connection and the parameters of both sides, so that
// one URL serves a publisher and a subscriber: each side ignores the
// other's parameters, whose values are still checked. subscriber adds the
// subscriber's own requirement, a group. Every problem is reported as a
// *relay.URLError (joined).
func parseURL(u *url.URL, subscriber bool) (urlConfig, error) {
	p := urlopt.New(u)
	c := urlConfig{opts: clientOptions(p, u)}
	prefix := p.String("prefix", "")
	c.pub = PublisherConfig{
		Prefix:   prefix,
		MaxBytes: p.Size("max_bytes", DefaultMaxBytes, 1),
		MaxLen:   int64(p.Int("maxlen", 0, 0)),
		MaxAge:   p.Duration("maxage", 0),
	}
	if c.pub.MaxBytes > maxBulk {
		p.Fail("max_bytes", "%d exceeds Redis's 512 MiB string limit", c.pub.MaxBytes)
	}
	if c.pub.MaxLen > 0 && c.pub.MaxAge > 0 {
		p.Fail("maxage", "maxlen and maxage exclude each other")
	}
	c.sub = SubscriberConfig{
		Group:         p.Group(subscriber),
		Consumer:      p.String("consumer", ""),
		Prefix:        prefix,
		Start:         p.Enum("start", DefaultStart, StartOldest, StartNewest),
		InFlight:      p.Int("inflight", 0, 1),
		InFlightBytes: p.Bytes("inflight_bytes", 0),
		Block:         p.Duration("block", DefaultBlock),
		ClaimIdle:     p.Duration("claim_idle", DefaultClaimIdle),
		ClaimEvery:    p.Duration("claim_every", DefaultClaimEvery),
		DelayPoll:     p.Duration("delay_poll", DefaultDelayPoll),
	}
	if c.sub.ConsumerTTL = p.Duration("consumer_ttl", DefaultConsumerTTL); c.sub.ConsumerTTL == 0 {
		c.sub.ConsumerTTL = -1 // consumer_ttl=0: never remove idle consumers
	}
	if c.sub.Consumer == HandbackConsumer {
		p.Fail("consumer", "%q is reserved", HandbackConsumer)
	}
	if c.sub.Block <= 0 {
		p.Fail("block", "must be positive")
	}
	if c.sub.ClaimIdle < minClaimIdle {
		p.Fail("claim_idle", "must be at least %v", minClaimIdle)
	}
	if c.sub.ClaimEvery <= 0 {
		p.Fail("claim_every", "must be positive")
	}
	if c.sub.DelayPoll <= 0 {
		p.Fail("delay_poll", "must be positive")
	}
	return c, p.Err()
}

// clientOptions builds go-redis options from the URL's host, user info,
// path (the database number) and connection parameters.
func clientOptions(p *urlopt.Params, u *url.URL) *redis.Options {
	o := &redis.Options{
		Addr:                  urlopt.Address(u, "6379"),
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			p.Fail("path", "database %q is not a non-negative number", db)
		}
		o.DB = n
	}
	o.DialTimeout = p.Duration("dial_timeout", 5*time.Second)
	o.ReadTimeout = p.Duration("read_timeout", 3*time.Second)
	o.WriteTimeout = p.Duration("write_timeout", 3*time.Second)
	o.PoolSize = p.Int("pool_size", 0, 0)
	o.ClientName = p.String("client_name", "")

	tf := tlsconf.Read(p)
	if !strings.EqualFold(u.Scheme, SchemeTLS) {
		for _, name := range tlsconf.Params {
			if p.Has(name) {
				p.Fail(name, "only valid with rediss://")
			}
		}
		return o
	}
	o.TLSConfig = tf.Build(u.Hostname(), p.Fail)
	return o
}
