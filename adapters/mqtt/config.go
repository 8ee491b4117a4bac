package mqtt

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Defaults of the configuration fields.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultKeepAlive      = 30 * time.Second
	DefaultInFlight       = 64
	// MaxPacketBytes is the most an MQTT packet's remaining length can
	// count, and the default of Config.MaxBytes.
	MaxPacketBytes = 268_435_455
)

// Config is the connection both sides use.
type Config struct {
	// Broker is the server in paho's form: "tcp://host:1883" or
	// "ssl://host:8883" (with TLS). Required.
	Broker             string
	Username, Password string
	TLS                *tls.Config
	// ConnectTimeout bounds each connection attempt (connect_timeout=).
	// Default 10s.
	ConnectTimeout time.Duration
	// KeepAlive (keep_alive=): the client pings after that long without
	// traffic and declares the connection lost when no answer came within
	// half of it more. Default 30s.
	KeepAlive time.Duration
	// MaxBytes bounds a PUBLISH payload, the envelope included
	// (max_bytes=): the broker's limit (Mosquitto's message_size_limit).
	// Default MaxPacketBytes, less the topic and the packet's header.
	MaxBytes int
	// Logger receives transient errors. Default slog.Default().
	Logger *slog.Logger
}

// Envelope says when a publisher wraps a message in the envelope.
type Envelope string

// Envelope modes (envelope=).
const (
	// EnvelopeAuto (default): plain when the message carries nothing a
	// subscriber could not derive (no Key, no Metadata, the ID DerivedID
	// of the payload, no Magic prefix), else wrapped.
	EnvelopeAuto Envelope = "auto"
	// EnvelopeNever: always plain, for subscribers that are not relay; a
	// message with a Key or Metadata is refused (relay.ErrNotSupported),
	// and its ID is not carried (subscribers derive one).
	EnvelopeNever Envelope = "never"
)

// PublisherConfig configures a publisher.
type PublisherConfig struct {
	// Retain sets the retain flag on every message (retain=): the broker
	// keeps each topic's last message for subscribers that come later
	// (relay's subscriptions ack those copies without delivering them).
	// Default false.
	Retain   bool
	Envelope Envelope
}

// SubscriberConfig configures a subscriber.
type SubscriberConfig struct {
	// Group names the shared subscription $share/GROUP/TOPIC (group=).
	// Required; no '/', '+', '#' or NUL.
	Group string
	// Instance names this process within its group (instance=, same
	// charset); it is part of the session's client ID, so a restarted
	// process must keep it to get what its sessions hold. Default: the
	// host name.
	Instance string
	// InFlight bounds unsettled messages per subscription (inflight=).
	// Default 64. The broker bounds them too (Mosquitto's
	// max_inflight_messages, default 20).
	InFlight int
	// InFlightBytes bounds their bytes (inflight_bytes=); 0 takes
	// driver.DefaultInFlightBytes, negative means none.
	InFlightBytes int64
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Broker == "" {
		errs = append(errs, errors.New("relay/mqtt: Broker is required"))
	}
	if c.ConnectTimeout < 0 || c.KeepAlive < 0 || (c.KeepAlive > 0 && c.KeepAlive < time.Second) {
		errs = append(errs, errors.New("relay/mqtt: ConnectTimeout must not be negative, KeepAlive is 0 or at least 1s"))
	}
	if c.MaxBytes < 0 || c.MaxBytes > MaxPacketBytes {
		errs = append(errs, fmt.Errorf("relay/mqtt: MaxBytes %d is outside 1..%d", c.MaxBytes, MaxPacketBytes))
	}
	return errors.Join(errs...)
}

// Validate reports every problem of c at once.
func (c PublisherConfig) Validate() error {
	if c.Envelope != "" && c.Envelope != EnvelopeAuto && c.Envelope != EnvelopeNever {
		return fmt.Errorf("relay/mqtt: Envelope %q is neither %q nor %q", c.Envelope, EnvelopeAuto, EnvelopeNever)
	}
	return nil
}

// Validate reports every problem of c at once.
func (c SubscriberConfig) Validate() error {
	var errs []error
	if c.Group == "" || !nameOK(c.Group) {
		errs = append(errs, fmt.Errorf("relay/mqtt: group %q is empty or holds '/', '+', '#' or NUL", c.Group))
	}
	if !nameOK(c.Instance) {
		errs = append(errs, fmt.Errorf("relay/mqtt: instance %q holds '/', '+', '#' or NUL", c.Instance))
	}
	if c.InFlight < 0 {
		errs = append(errs, errors.New("relay/mqtt: InFlight must not be negative"))
	}
	return errors.Join(errs...)
}

// nameOK reports whether s can stand in a shared subscription's name and
// a SessionID.
func nameOK(s string) bool { return !strings.ContainsAny(s, "\x00/+#") }

func (c *Config) defaults() {
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, DefaultConnectTimeout)
	c.KeepAlive = cmp.Or(c.KeepAlive, DefaultKeepAlive)
	c.MaxBytes = cmp.Or(c.MaxBytes, MaxPacketBytes)
	c.Logger = cmp.Or(c.Logger, slog.Default())
}

func (c *SubscriberConfig) defaults() {
	c.InFlight = cmp.Or(c.InFlight, DefaultInFlight)
	if c.Instance == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "localhost"
		}
		c.Instance = strings.Map(func(r rune) rune {
			if nameOK(string(r)) {
				return r
			}
			return '_'
		}, host)
	}
}
