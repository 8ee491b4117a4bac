// Package memory is the in-process backend (mem://NAME): the embedded
// default and the reference semantics every other adapter is measured by.
//
// Every mem://NAME opened in one process shares the broker NAME; nothing
// crosses process boundaries and nothing survives the process. Semantics:
//
//   - A group is a queue of competing consumers; every group of a topic
//     gets its own copy of each message.
//   - At-least-once: a message leaves its group only on Ack. Unsettled
//     messages return to the group at once when a subscription ends.
//   - Nack redelivers with Attempt+1; NackAfter delays it natively.
//   - Messages are delivered in publish order; a redelivered message goes
//     back to its original place in the queue.
//   - Messages published to a topic that has no group yet are kept (the
//     newest 10,000 and at most 64 MiB; older ones are dropped) and handed
//     to the first group created by Subscribe or Provision. Groups created
//     later start empty.
//   - Queues of existing groups are not bounded, like a broker's.
//   - Lag (relay.LagReporter) counts every message of the topic the group
//     has not acked: queued, delayed by NackAfter, or delivered and
//     unsettled.
//
// URL: mem://NAME?group=G&inflight=N&max_bytes=B (see README). Both sides
// accept all three parameters and ignore those of the other side.
package memory

import (
	"context"
	"net/url"
	"slices"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/urlopt"
)

// Scheme is the URL scheme of this backend.
const Scheme = "mem"

// DefaultMaxBytes is the default limit on a message's encoded size.
const DefaultMaxBytes = 16 << 20

func init() { relay.Register(Scheme, opener{}) }

// PublisherConfig configures a publisher. The zero value is usable.
type PublisherConfig struct {
	// MaxBytes limits payload plus ID, Key and metadata (max_bytes=). Default 16 MiB.
	MaxBytes int
}

// SubscriberConfig configures a subscriber.
type SubscriberConfig struct {
	// Group names the group of competing consumers (group=). Required.
	Group string
	// InFlight bounds unsettled messages per subscription (inflight=). Default 64.
	InFlight int
}

type opener struct{}

// parseURL reads the parameters of both sides, so that one URL serves a
// publisher and a subscriber: each side ignores the other's parameters,
// whose values are still checked. subscriber adds the group requirement.
func parseURL(u *url.URL, subscriber bool) (PublisherConfig, SubscriberConfig, error) {
	p := urlopt.New(u)
	pc := PublisherConfig{MaxBytes: p.Int("max_bytes", DefaultMaxBytes, 1)}
	sc := SubscriberConfig{
		Group:    p.String("group", ""),
		InFlight: p.Int("inflight", 64, 1),
	}
	if subscriber && sc.Group == "" {
		p.Fail("group", "required: the name of this subscriber's group of competing consumers")
	}
	return pc, sc, p.Err()
}

func (opener) CheckURL(u *url.URL) error {
	_, _, err := parseURL(u, false)
	return err
}

func (opener) CheckSubscriberURL(u *url.URL) error {
	_, _, err := parseURL(u, true)
	return err
}

func (opener) OpenPublisher(_ context.Context, u *url.URL) (relay.Publisher, error) {
	cfg, _, err := parseURL(u, false)
	if err != nil {
		return nil, err
	}
	return NewPublisher(brokerName(u), cfg), nil
}

func (opener) OpenSubscriber(_ context.Context, u *url.URL) (relay.Subscriber, error) {
	_, cfg, err := parseURL(u, true)
	if err != nil {
		return nil, err
	}
	return NewSubscriber(brokerName(u), cfg)
}

func brokerName(u *url.URL) string {
	if u.Host != "" {
		return u.Host
	}
	if u.Opaque != "" {
		return u.Opaque
	}
	return "default"
}

func capabilities(maxBytes int) relay.Capabilities {
	return relay.Capabilities{
		Backend:             "memory",
		Durable:             false,
		CrossProcess:        false,
		Ordering:            relay.OrderPerTopic,
		NativeDelay:         true,
		AttemptFromBroker:   true,
		MaxMessageBytes:     maxBytes,
		RetainedBeforeGroup: "kept for the first group (newest 10,000 / 64 MiB)",

		// Acks are per message: an acked message is never delivered again.
		AckedAfterUnsettledRedelivered: false,
	}
}

// NewPublisher returns a publisher to the in-process broker name.
func NewPublisher(name string, cfg PublisherConfig) relay.Publisher {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	return driver.NewPublisher(&pubDriver{b: brokerNamed(name), caps: capabilities(cfg.MaxBytes)}, 0)
}

type pubDriver struct {
	b    *broker
	caps relay.Capabilities
}

func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.b.publish(topic, msgs)
	return nil
}
func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }
func (d *pubDriver) Close() error                     { return nil }

// NewSubscriber returns a subscriber of the in-process broker name for cfg.Group.
func NewSubscriber(name string, cfg SubscriberConfig) (relay.Subscriber, error) {
	if cfg.Group == "" {
		return nil, &relay.URLError{URL: "mem://" + name, Param: "group", Reason: "required"}
	}
	d := &subDriver{b: brokerNamed(name), group: cfg.Group, caps: capabilities(DefaultMaxBytes)}
	return driver.NewSubscriber(d, driver.Options{InFlight: cfg.InFlight}), nil
}

type subDriver struct {
	b     *broker
	group string
	caps  relay.Capabilities
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }
func (d *subDriver) Close() error                     { return nil }

func (d *subDriver) Provision(_ context.Context, topic string) error {
	d.b.groupFor(topic, d.group)
	return nil
}

// Lag implements driver.LagDriver: the messages of topic that the group
// has not acked, whether waiting in its queue, held back by NackAfter, or
// delivered and not yet settled. For a group that does not exist yet it is
// the retained messages when the topic has no group (they would go to
// this one) and 0 otherwise. It never fails.
func (d *subDriver) Lag(_ context.Context, topic string) (int64, error) {
	return d.b.lag(topic, d.group), nil
}

func (d *subDriver) Subscribe(_ context.Context, topic string) (driver.Receiver, error) {
	return &receiver{b: d.b, g: d.b.groupFor(topic, d.group)}, nil
}

type receiver struct {
	b        *broker
	g        *group
	taken    []*entry          // reused by every Receive
	out      []driver.Received // returned by Receive, reused by the next
	payloads arena
}

// Receive copies up to max ready entries into messages; the messages of
// one call share one allocation, and small payloads share an arena.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		entries, wait := r.b.take(r.g, max, r.taken[:0])
		r.taken = entries
		if len(entries) > 0 {
			clear(r.out)
			out := slices.Grow(r.out[:0], len(entries))[:len(entries)]
			r.out = out
			msgs := make([]relay.Message, len(entries))
			for i, e := range entries {
				m := &msgs[i]
				m.ID, m.Key, m.Metadata, m.Payload = e.id, e.key, e.md.Clone(), r.payloads.copy(e.payload)
				out[i] = driver.Received{Msg: m, Attempt: e.deliveries, Handle: e}
			}
			clear(entries)
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait:
		}
	}
}

func (r *receiver) Settle(_ context.Context, batch []driver.Settle) error {
	acks := 0
	for _, s := range batch {
		if s.Ack {
			acks++
		} else {
			r.b.requeue(r.g, s.Handle.(*entry), s.Delay)
		}
	}
	if acks > 0 {
		r.b.acked(r.g, acks)
	}
	return nil
}

func (r *receiver) Release(_ context.Context, handles []any) error {
	for _, h := range handles {
		r.b.requeue(r.g, h.(*entry), 0)
	}
	return nil
}

func (r *receiver) Close(context.Context) error { return nil }
