package nats

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/tlsconf"
	"github.com/go-relay/relay/driver/urlopt"
)

// Scheme of this backend.
const Scheme = "nats"

func init() { relay.Register(Scheme, opener{}) }

type opener struct{}

// urlConfig is everything a nats:// URL configures, for both sides.
type urlConfig struct {
	servers string
	opts    []natsgo.Option
	dial    time.Duration
	stream  StreamConfig
	sub     SubscriberConfig
}

// parseURL reads the connection and the parameters of both sides, so that
// one URL serves a publisher and a subscriber; each side ignores the
// other's parameters, whose values are still checked. subscriber adds the
// subscriber's own requirement, a group. Every problem is a
// *relay.URLError (joined).
func parseURL(u *url.URL, subscriber bool) (urlConfig, error) {
	p := urlopt.New(u)
	var c urlConfig
	host := u.Host
	if u.Port() == "" {
		h := u.Hostname()
		if h == "" {
			h = "127.0.0.1"
		}
		host = net.JoinHostPort(h, "4222")
	}
	if u.Path != "" && u.Path != "/" {
		p.Fail("path", "a nats:// URL has no path (name the stream with stream=)")
	}
	c.servers = "nats://" + host
	c.opts = []natsgo.Option{
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250 * time.Millisecond),
	}
	if u.User != nil {
		pass, _ := u.User.Password()
		c.opts = append(c.opts, natsgo.UserInfo(u.User.Username(), pass))
	}
	if tok := p.String("token", ""); tok != "" {
		if u.User != nil {
			p.Fail("token", "give either user:password in the URL or token=, not both")
		}
		c.opts = append(c.opts, natsgo.Token(tok))
	}
	if creds := p.String("creds", ""); creds != "" {
		c.opts = append(c.opts, natsgo.UserCredentials(creds))
	}
	if name := p.String("name", ""); name != "" {
		c.opts = append(c.opts, natsgo.Name(name))
	}
	c.dial = p.Duration("dial_timeout", DefaultDialTimeout)
	if c.dial <= 0 {
		p.Fail("dial_timeout", "must be positive")
	}
	ping := p.Duration("ping_interval", DefaultPingInterval)
	if ping <= 0 {
		p.Fail("ping_interval", "must be positive")
	}
	c.opts = append(c.opts, natsgo.PingInterval(ping), natsgo.MaxPingsOutstanding(DefaultMaxPingsOut))
	useTLS := p.Bool("tls", false)
	tf := tlsconf.Read(p)
	if useTLS || tf.Set() {
		c.opts = append(c.opts, natsgo.Secure(tf.Build(u.Hostname(), p.Fail)))
	}

	c.stream = StreamConfig{
		Stream:          p.String("stream", ""),
		Storage:         Storage(p.Enum("storage", string(StorageFile), string(StorageFile), string(StorageMemory))),
		Replicas:        p.Int("replicas", 1, 1),
		MaxAge:          p.Duration("max_age", 0),
		MaxMsgs:         int64(p.Int("max_msgs", 0, 0)),
		MaxBytes:        int64(p.Size("max_bytes", 0, 0)),
		DuplicateWindow: p.Duration("duplicate_window", DefaultDuplicateWindow),
	}
	if c.stream.MaxAge < 0 {
		p.Fail("max_age", "must not be negative")
	}
	if c.stream.DuplicateWindow <= 0 {
		p.Fail("duplicate_window", "must be positive")
	}
	if c.stream.MaxAge > 0 && c.stream.DuplicateWindow > c.stream.MaxAge {
		p.Fail("duplicate_window", "%v exceeds max_age %v (JetStream refuses such a stream)", c.stream.DuplicateWindow, c.stream.MaxAge)
	}
	if c.stream.Stream != "" && !validName(c.stream.Stream) {
		p.Fail("stream", "%q is not a valid stream name (no '.', '*', '>', '/', '\\' or whitespace)", c.stream.Stream)
	}

	c.sub = SubscriberConfig{
		Group:         p.String("group", ""),
		InFlight:      p.Int("inflight", DefaultInFlight, 1),
		InFlightBytes: p.Bytes("inflight_bytes", 0),
		AckWait:       p.Duration("ack_wait", DefaultAckWait),
		MaxDeliver:    p.Int("max_deliver", 0, 0),
		MaxAckPending: p.Int("max_ack_pending", 0, 1),
		FetchWait:     p.Duration("fetch_wait", DefaultFetchWait),
	}
	if subscriber && c.sub.Group == "" {
		p.Fail("group", "required: the name of this subscriber's group of competing consumers")
	}
	if c.sub.AckWait < time.Second {
		p.Fail("ack_wait", "must be at least 1s")
	}
	if c.sub.FetchWait < 10*time.Millisecond || c.sub.FetchWait > 10*time.Second {
		p.Fail("fetch_wait", "must be between 10ms and 10s (the end of a subscription waits for it)")
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

// OpenPublisher opens nats://[user:pass@]host:port?... (see docs/nats.md).
func (opener) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	c, err := parseURL(u, false)
	if err != nil {
		return nil, err
	}
	nc, err := connect(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("relay/nats: %s: %w", relay.Redact(u.String()), err)
	}
	pub, err := newPublisher(nc, c.stream, true)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("relay/nats: %s: %w", relay.Redact(u.String()), err)
	}
	return pub, nil
}

// OpenSubscriber opens nats://[user:pass@]host:port?group=G&... (see docs/nats.md).
func (opener) OpenSubscriber(ctx context.Context, u *url.URL) (relay.Subscriber, error) {
	c, err := parseURL(u, true)
	if err != nil {
		return nil, err
	}
	nc, err := connect(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("relay/nats: %s: %w", relay.Redact(u.String()), err)
	}
	sub, err := newSubscriber(nc, c.stream, c.sub, true)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("relay/nats: %s: %w", relay.Redact(u.String()), err)
	}
	return sub, nil
}

// connect dials within dial_timeout and ctx's deadline, whichever is
// sooner (nats.go's Connect takes no ctx).
func connect(ctx context.Context, c urlConfig) (*natsgo.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	timeout := c.dial
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	opts := append([]natsgo.Option{natsgo.Timeout(timeout)}, c.opts...)
	nc, err := natsgo.Connect(c.servers, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	return nc, nil
}
