package redisstream

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/tlsconf"
	"github.com/go-relay/relay/driver/urlopt"
)

// Schemes of this backend.
const (
	Scheme    = "redis"
	SchemeTLS = "rediss"
)

func init() {
	relay.Register(Scheme, opener{})
	relay.Register(SchemeTLS, opener{})
}

type opener struct{}

// urlConfig is everything a redis:// URL configures, for both sides.
type urlConfig struct {
	opts *redis.Options
	pub  PublisherConfig
	sub  SubscriberConfig
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
		Group:         p.String("group", ""),
		Consumer:      p.String("consumer", ""),
		Prefix:        prefix,
		Start:         p.Enum("start", DefaultStart, StartOldest, StartNewest),
		InFlight:      p.Int("inflight", DefaultInFlight, 1),
		InFlightBytes: p.Bytes("inflight_bytes", 0),
		Block:         p.Duration("block", DefaultBlock),
		ClaimIdle:     p.Duration("claim_idle", DefaultClaimIdle),
		ClaimEvery:    p.Duration("claim_every", DefaultClaimEvery),
		DelayPoll:     p.Duration("delay_poll", DefaultDelayPoll),
	}
	if c.sub.ConsumerTTL = p.Duration("consumer_ttl", DefaultConsumerTTL); c.sub.ConsumerTTL == 0 {
		c.sub.ConsumerTTL = -1 // consumer_ttl=0: never remove idle consumers
	}
	if subscriber && c.sub.Group == "" {
		p.Fail("group", "required: the name of this subscriber's group of competing consumers")
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

// OpenPublisher opens redis://[user:pass@]host:port/DB?... (see docs/redis.md).
func (opener) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	c, err := parseURL(u, false)
	if err != nil {
		return nil, err
	}
	rc := redis.NewClient(c.opts)
	pub, err := newPublisher(ctx, rc, c.pub, true)
	if err != nil {
		_ = rc.Close()
		return nil, fmt.Errorf("relay/redis: %s: %w", relay.Redact(u.String()), err)
	}
	return pub, nil
}

// OpenSubscriber opens redis://[user:pass@]host:port/DB?group=G&... (see docs/redis.md).
func (opener) OpenSubscriber(ctx context.Context, u *url.URL) (relay.Subscriber, error) {
	c, err := parseURL(u, true)
	if err != nil {
		return nil, err
	}
	rc := redis.NewClient(c.opts)
	sub, err := newSubscriber(ctx, rc, c.sub, true)
	if err != nil {
		_ = rc.Close()
		return nil, fmt.Errorf("relay/redis: %s: %w", relay.Redact(u.String()), err)
	}
	return sub, nil
}

// clientOptions builds go-redis options from the URL's host, user info,
// path (the database number) and connection parameters.
func clientOptions(p *urlopt.Params, u *url.URL) *redis.Options {
	o := &redis.Options{
		Addr:                  u.Host,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	}
	if u.Port() == "" {
		host := u.Hostname()
		if host == "" {
			host = "127.0.0.1"
		}
		o.Addr = net.JoinHostPort(host, "6379")
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
