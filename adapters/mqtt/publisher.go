package mqtt

import (
	"context"
	"errors"
	"fmt"
	"sync"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// DefaultPublishBatch is how many QoS 1 publishes one SendBatch has
// outstanding before it waits for their PUBACKs (Capabilities().MaxBatch).
const DefaultPublishBatch = 256

func capabilities(maxBytes int) relay.Capabilities {
	return relay.Capabilities{
		Backend:      "mqtt",
		Durable:      true,
		CrossProcess: true,
		// The broker keeps a topic's order per session; a group's members
		// each see their share in that order.
		Ordering:             relay.OrderPerTopic,
		NativeDelay:          false, // NackAfter is held in process by the shared layer
		DelayedDelivery:      relay.DelayNone,
		NativeDeadLetter:     false,
		AttemptFromBroker:    false, // counted in process; a resend after a restart counts 2
		MaxMessageBytes:      maxBytes,
		MaxMessageBytesSetBy: "max_bytes= (at most the broker's message_size_limit; MQTT's packet limit is 256 MiB)",
		MaxBatch:             DefaultPublishBatch,
		RetainedBeforeGroup:  "dropped: the broker keeps a topic's messages only for sessions subscribed to it (Provision creates the group's session ahead)",
	}
}

// NewPublisher returns a publisher connected within ctx. It sends every
// message at QoS 1 and returns once the broker acknowledged each one
// (PUBACK). It is safe for concurrent use and implements
// relay.HealthChecker.
func NewPublisher(ctx context.Context, cfg Config, pc PublisherConfig) (relay.Publisher, error) {
	if err := errors.Join(cfg.Validate(), pc.Validate()); err != nil {
		return nil, err
	}
	cfg.defaults()
	if pc.Envelope == "" {
		pc.Envelope = EnvelopeAuto
	}
	d := &pubDriver{cfg: cfg, pc: pc, caps: capabilities(cfg.MaxBytes)}
	if _, err := d.conn(ctx); err != nil {
		return nil, err
	}
	return driver.NewPublisher(d, 0), nil
}

type pubDriver struct {
	cfg  Config
	pc   PublisherConfig
	caps relay.Capabilities

	dial   sync.Mutex // one connection attempt at a time
	mu     sync.Mutex // the fields below; never held across a broker call
	client paho.Client
	why    error // why the last connection was lost or not made
	closed bool
}

// conn returns the connected client, or connects a new one (a clean
// session under a client ID of its own) when none is up; concurrent
// callers wait for one attempt.
func (d *pubDriver) conn(ctx context.Context) (paho.Client, error) {
	up := func() (paho.Client, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.closed {
			return nil, relay.ErrClosed
		}
		if d.client != nil && d.client.IsConnectionOpen() {
			return d.client, nil
		}
		return nil, nil
	}
	if cl, err := up(); cl != nil || err != nil {
		return cl, err
	}
	d.dial.Lock()
	defer d.dial.Unlock()
	if cl, err := up(); cl != nil || err != nil {
		return cl, err
	}
	var cl paho.Client
	cl = d.cfg.newClient("relay-pub-"+relay.NewID(), true, nil, func(_ paho.Client, err error) {
		d.mu.Lock()
		if d.client == cl {
			d.client, d.why = nil, err
		}
		d.mu.Unlock()
	})
	_, err := connect(ctx, cl)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case err != nil:
		d.why = err
		return nil, err
	case d.closed:
		cl.Disconnect(0)
		return nil, relay.ErrClosed
	}
	d.client, d.why = cl, nil
	return cl, nil
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

// Health implements relay.HealthChecker: why the connection is down, nil
// while it is up.
func (d *pubDriver) Health() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client != nil && d.client.IsConnectionOpen() {
		return nil
	}
	if d.why != nil {
		return fmt.Errorf("relay/mqtt: not connected: %w", d.why)
	}
	return errors.New("relay/mqtt: not connected")
}

// ValidateTopic implements driver.TopicValidator.
func (d *pubDriver) ValidateTopic(topic string) error { return validateTopic(topic) }

// ValidateMessage implements driver.MessageValidator: the PUBLISH payload
// (envelope included) within max_bytes and the packet within the
// protocol's limit; with envelope=never, no Key or Metadata to drop.
func (d *pubDriver) ValidateMessage(topic string, m *relay.Message) error {
	if d.pc.Envelope == EnvelopeNever && (m.Key != "" || len(m.Metadata) > 0) {
		return fmt.Errorf("relay/mqtt: message %s has a Key or Metadata, which envelope=never cannot carry: %w", m.ID, relay.ErrNotSupported)
	}
	caps := d.caps
	caps.MaxMessageBytes = min(d.cfg.MaxBytes, MaxPacketBytes-4-len(topic)) // topic length, packet identifier
	return driver.SizeError(m, encodedSize(m, d.pc.Envelope), caps)
}

// SendBatch makes one attempt: it publishes msgs at QoS 1 on the
// connection (connecting one when none is up) and waits for every
// PUBACK. A lost connection fails what was not acknowledged, marked
// driver.Retryable, so that the shared publisher sends it again with
// backoff until ctx ends; a message whose PUBACK was lost with the
// connection is then stored twice (at-least-once).
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	cl, err := d.conn(ctx)
	if err != nil {
		switch {
		case errors.Is(err, relay.ErrClosed):
			return err
		case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
			return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case ctx.Err() != nil:
			return err
		}
		return driver.Retryable(err)
	}
	toks := make([]paho.Token, len(msgs))
	for i, m := range msgs {
		if ctx.Err() != nil {
			break
		}
		toks[i] = cl.Publish(topic, 1, d.pc.Retain, encode(m, d.pc.Envelope))
	}
	var failed []relay.MessageFailure
	for i, tok := range toks {
		var err error
		if tok == nil {
			err = ctx.Err()
		} else {
			err = await(ctx, tok, "publishing")
		}
		if err != nil {
			if ctx.Err() == nil {
				err = driver.Retryable(err)
			}
			failed = append(failed, relay.MessageFailure{ID: msgs[i].ID, Err: err})
		}
	}
	return driver.SendError(len(msgs), failed, nil)
}

// Close disconnects. Publish calls have returned by now.
func (d *pubDriver) Close() error {
	d.mu.Lock()
	cl := d.client
	d.client, d.closed = nil, true
	d.mu.Unlock()
	if cl != nil {
		cl.Disconnect(quiesce)
	}
	return nil
}
