package nats

import (
	"context"
	"fmt"
	"net/url"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/tlsconf"
	"github.com/go-relay/relay/driver/urlopt"
)

// Scheme of this backend.
const Scheme = "nats"

func init() { opener.Register(Scheme) }

// opener opens nats://[user:pass@]host:port?... (see docs/nats.md).
var opener = driver.Opener[urlConfig]{
	Backend: "nats",
	Parse:   parseURL,
	Connect: func(ctx context.Context, c *urlConfig) (err error) {
		c.nc, err = connect(ctx, *c)
		return err
	},
	Disconnect: func(c urlConfig) { c.nc.Close() },
	NewPublisher: func(_ context.Context, c urlConfig) (relay.Publisher, error) {
		return newPublisher(c.nc, c.stream, true)
	},
	NewSubscriber: func(_ context.Context, c urlConfig) (relay.Subscriber, error) {
		return newSubscriber(c.nc, c.stream, c.sub, true)
	},
	Defaults: relay.URLDefaults{SourceWindow: driver.DefaultSourceWindow, EitherSide: true},
}

// urlConfig is everything a nats:// URL configures, for both sides.
type urlConfig struct {
	servers string
	opts    []natsgo.Option
	dial    time.Duration
	stream  StreamConfig
	sub     SubscriberConfig
	nc      *natsgo.Conn // set by opener.Connect
}

// parseURL reads the connection and the parameters of both sides, so that
// one URL serves a publisher and a subscriber; each side ignores the
// other's parameters, whose values are still checked. subscriber adds the
// subscriber's own requirement, a group. Every problem is a
// *relay.URLError (joined).
func parseURL(u *url.URL, subscriber bool) (urlConfig, error) {
	p := urlopt.New(u)
	var c urlConfig
	if u.Path != "" && u.Path != "/" {
		p.Fail("path", "a nats:// URL has no path (name the stream with stream=)")
	}
	c.servers = "nats://" + urlopt.Address(u, "4222")
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
		Group:         p.Group(subscriber),
		InFlight:      p.Int("inflight", 0, 1),
		InFlightBytes: p.Bytes("inflight_bytes", 0),
		AckWait:       p.Duration("ack_wait", DefaultAckWait),
		MaxDeliver:    p.Int("max_deliver", 0, 0),
		MaxAckPending: p.Int("max_ack_pending", 0, 1),
		FetchWait:     p.Duration("fetch_wait", DefaultFetchWait),
	}
	if c.sub.AckWait < time.Second {
		p.Fail("ack_wait", "must be at least 1s")
	}
	if c.sub.FetchWait < 10*time.Millisecond || c.sub.FetchWait > 10*time.Second {
		p.Fail("fetch_wait", "must be between 10ms and 10s (the end of a subscription waits for it)")
	}
	return c, p.Err()
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
