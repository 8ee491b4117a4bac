package mqtt

import (
	"context"
	"net/url"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/tlsconf"
	"github.com/go-relay/relay/driver/urlopt"
)

// Schemes of this backend: mqtt:// (TCP, port 1883) and mqtts:// (TLS,
// port 8883).
const (
	Scheme    = "mqtt"
	SchemeTLS = "mqtts"
)

func init() { opener.Register(Scheme, SchemeTLS) }

// opener opens mqtt://[user:pass@]host:1883?... and mqtts:// (see
// docs/mqtt.md).
var opener = driver.Opener[urlConfig]{
	Backend: "mqtt",
	Parse:   parseURL,
	NewPublisher: func(ctx context.Context, c urlConfig) (relay.Publisher, error) {
		return NewPublisher(ctx, c.cfg, c.pub)
	},
	NewSubscriber: func(ctx context.Context, c urlConfig) (relay.Subscriber, error) {
		return NewSubscriber(ctx, c.cfg, c.sub)
	},
	Defaults: relay.URLDefaults{SourceWindow: driver.DefaultSourceWindow, EitherSide: true},
}

// urlConfig is everything an mqtt:// URL configures, for both sides.
type urlConfig struct {
	cfg Config
	pub PublisherConfig
	sub SubscriberConfig
}

// parseURL reads the connection and the parameters of both sides, so
// that one URL serves a publisher and a subscriber; subscriber adds the
// subscriber's own requirement, a group. Every problem is a
// *relay.URLError (joined).
func parseURL(u *url.URL, subscriber bool) (urlConfig, error) {
	p := urlopt.New(u)
	var c urlConfig
	if u.Path != "" && u.Path != "/" {
		p.Fail("path", "an mqtt:// URL has no path (the topic is given to Publish and Subscribe)")
	}
	secure := u.Scheme == SchemeTLS
	if secure {
		c.cfg.Broker = "ssl://" + urlopt.Address(u, "8883")
	} else {
		c.cfg.Broker = "tcp://" + urlopt.Address(u, "1883")
	}
	if u.User != nil {
		c.cfg.Username = u.User.Username()
		c.cfg.Password, _ = u.User.Password()
	}
	tf := tlsconf.Read(p)
	if tf.Set() && !secure {
		for _, name := range tlsconf.Params {
			if u.Query().Has(name) {
				p.Fail(name, "TLS options need the mqtts:// scheme")
				break
			}
		}
	}
	if secure {
		c.cfg.TLS = tf.Build(u.Hostname(), p.Fail)
	}
	c.cfg.ConnectTimeout = p.Duration("connect_timeout", DefaultConnectTimeout)
	c.cfg.KeepAlive = p.Duration("keep_alive", DefaultKeepAlive)
	c.cfg.MaxBytes = p.Size("max_bytes", MaxPacketBytes, 1)
	c.pub.Retain = p.Bool("retain", false)
	c.pub.Envelope = Envelope(p.Enum("envelope", string(EnvelopeAuto), string(EnvelopeAuto), string(EnvelopeNever)))
	c.sub = SubscriberConfig{
		Group:         p.String("group", ""),
		Instance:      p.String("instance", ""),
		InFlight:      p.Int("inflight", DefaultInFlight, 1),
		InFlightBytes: p.Bytes("inflight_bytes", 0),
	}
	if (subscriber || c.sub.Group != "") && (c.sub.Group == "" || !nameOK(c.sub.Group)) {
		p.Fail("group", "required: the name of this subscriber's group, without '/', '+', '#' or NUL (it names the shared subscription $share/GROUP/topic)")
	}
	if !nameOK(c.sub.Instance) {
		p.Fail("instance", "%q holds '/', '+', '#' or NUL", c.sub.Instance)
	}
	if c.cfg.ConnectTimeout <= 0 {
		p.Fail("connect_timeout", "must be positive")
	}
	if c.cfg.KeepAlive < time.Second {
		p.Fail("keep_alive", "must be at least 1s (MQTT counts it in seconds)")
	}
	if c.cfg.MaxBytes > MaxPacketBytes {
		p.Fail("max_bytes", "%d is over MQTT's packet limit of %d bytes", c.cfg.MaxBytes, MaxPacketBytes)
	}
	return c, p.Err()
}
