package watermill

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// BackendConfig describes a Watermill Pub/Sub used as a relay backend.
// The zero value claims nothing: no durability, no ordering.
type BackendConfig struct {
	// Capabilities are what the Watermill Pub/Sub can do, declared by the
	// caller, who knows which Pub/Sub it is and how it is configured
	// (relay cannot ask Watermill). Backend defaults to "watermill".
	// NativeDelay and AttemptFromBroker are always false: Watermill has no
	// delayed Nack and no delivery counter, so relay emulates NackAfter by
	// holding the message and counts attempts in process.
	Capabilities relay.Capabilities
	// KeyMetadata names the Watermill metadata entry that carries relay's
	// Message.Key. Default DefaultKeyMetadata ("relay_key").
	KeyMetadata string
	// Subscription tunes relay's shared subscription layer (in-flight
	// window, close timeout, logger). Most Watermill subscribers deliver
	// the next message of a subscription only after the previous one was
	// acked, so a window larger than 1 buys little with them.
	Subscription driver.Options
	// PublishCloseTimeout bounds how long the publisher's Close waits for
	// publishes in progress. Default driver.DefaultCloseTimeout (5s).
	PublishCloseTimeout time.Duration
	// AttemptMemory bounds how many nacked message IDs a subscription
	// remembers to count attempts. Default 10,000.
	AttemptMemory int
}

func (c BackendConfig) caps() relay.Capabilities {
	caps := c.Capabilities
	if caps.Backend == "" {
		caps.Backend = "watermill"
	}
	caps.NativeDelay, caps.MaxDelay, caps.AttemptFromBroker = false, 0, false
	return caps
}

// NewBackendPublisher returns a relay.Publisher that publishes through the
// Watermill publisher p, so relay's router, bridge and CLI reach brokers
// only Watermill supports. The relay.Publisher owns p: its Close closes
// p. It is built on relay's shared data path (package driver): limits
// from c.Capabilities are checked, a message without ID gets a UUIDv7,
// PublishAsync works.
//
// Each relay Publish call (split by Capabilities.MaxBatch when set)
// becomes one Watermill Publish call; what it returns is what relay's
// Publish returns (Watermill cannot say which messages of a failed call
// were sent, so all count as failed). Watermill's Publish takes no ctx:
// it is given to each message as its Context, and when ctx ends first
// Publish returns ctx's error while the Watermill call goes on in the
// background until it returns (the messages may still be published).
func NewBackendPublisher(p message.Publisher, c BackendConfig) relay.Publisher {
	d := &pubDriver{p: p, caps: c.caps(), key: keyName(c.KeyMetadata)}
	return driver.NewPublisher(d, c.PublishCloseTimeout)
}

type pubDriver struct {
	p    message.Publisher
	caps relay.Capabilities
	key  string
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	wms := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		wms[i] = toWatermill(m, d.key)
		wms[i].SetContext(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- d.p.Publish(topic, wms...) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("relay/watermill: Watermill publish to %q: %w", topic, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *pubDriver) Close() error { return d.p.Close() }

// NewBackendSubscriber returns a relay.Subscriber that receives through
// the Watermill subscriber s. The group is whatever s was configured with
// (a Kafka consumer group, an AMQP queue name, ...): relay cannot choose
// it. The relay.Subscriber owns s: its Close closes s.
//
// Each relay subscription is one Watermill Subscribe call; relay's Ack
// and Nack become Watermill's Ack and Nack; when a relay subscription
// ends, its unsettled messages are Nacked (so that Watermill redelivers
// them) before the Watermill subscription's ctx is cancelled. Attempt is
// counted in process per subscription by message ID, NackAfter is
// emulated by relay (the message stays unsettled at Watermill during the
// delay, which with most Watermill subscribers also holds back the next
// message). The relay.Subscriber implements relay.Provisioner (with
// SubscribeInitialize) only when s implements message.SubscribeInitializer.
func NewBackendSubscriber(s message.Subscriber, c BackendConfig) relay.Subscriber {
	limit := c.AttemptMemory
	if limit <= 0 {
		limit = 10000
	}
	d := &subDriver{s: s, caps: c.caps(), key: keyName(c.KeyMetadata), limit: limit}
	sub := driver.NewSubscriber(d, c.Subscription)
	if _, ok := s.(message.SubscribeInitializer); ok {
		return sub
	}
	return unprovisioned{sub}
}

// unprovisioned is a relay.Subscriber over a Watermill subscriber that
// cannot provision: it does not implement relay.Provisioner, so that
// callers (the bridge, drivertest) see that the backend cannot create a
// group ahead rather than get an error from Provision.
type unprovisioned struct{ s *driver.Subscriber }

func (u unprovisioned) Subscribe(ctx context.Context, topic string) (<-chan *relay.Message, error) {
	return u.s.Subscribe(ctx, topic)
}
func (u unprovisioned) Close() error                     { return u.s.Close() }
func (u unprovisioned) Capabilities() relay.Capabilities { return u.s.Capabilities() }
func (u unprovisioned) Health() error                    { return u.s.Health() }

type subDriver struct {
	s     message.Subscriber
	caps  relay.Capabilities
	key   string
	limit int
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

func (d *subDriver) Provision(ctx context.Context, topic string) error {
	si, ok := d.s.(message.SubscribeInitializer)
	if !ok {
		return fmt.Errorf("relay/watermill: the Watermill subscriber has no SubscribeInitialize: %w", relay.ErrNotSupported)
	}
	done := make(chan error, 1)
	go func() { done <- si.SubscribeInitialize(topic) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("relay/watermill: SubscribeInitialize(%q): %w", topic, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	// The Watermill subscription outlives ctx until Close, so that the
	// final settlements and the release reach it.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ch, err := d.s.Subscribe(wctx, topic)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("relay/watermill: Watermill subscribe to %q: %w", topic, err)
	}
	return &receiver{ch: ch, cancel: cancel, topic: topic, key: d.key,
		attempts: newAttempts(d.limit)}, nil
}

func (d *subDriver) Close() error { return d.s.Close() }

// handle is a received Watermill message with what settling it needs.
type handle struct {
	wm      *message.Message
	id      string
	attempt int
}

type receiver struct {
	ch       <-chan *message.Message
	cancel   context.CancelFunc
	topic    string
	key      string
	attempts *attempts
	buf      []driver.Received
}

func (r *receiver) received(wm *message.Message) driver.Received {
	m := toRelay(wm, r.key)
	if m.ID == "" {
		m.ID = relay.NewID()
	}
	n := r.attempts.next(m.ID)
	return driver.Received{Msg: m, Attempt: n, Handle: &handle{wm: wm, id: m.ID, attempt: n}}
}

// Receive waits for one message, then takes what else is ready, up to max.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	r.buf = r.buf[:0]
	select {
	case wm, ok := <-r.ch:
		if !ok {
			return nil, fmt.Errorf("relay/watermill: the Watermill subscription of %q ended: %w", r.topic, relay.ErrClosed)
		}
		r.buf = append(r.buf, r.received(wm))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for len(r.buf) < max {
		select {
		case wm, ok := <-r.ch:
			if !ok {
				return r.buf, nil
			}
			r.buf = append(r.buf, r.received(wm))
		default:
			return r.buf, nil
		}
	}
	return r.buf, nil
}

func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	for _, s := range batch {
		h := s.Handle.(*handle)
		if s.Ack {
			r.attempts.forget(h.id)
			h.wm.Ack()
		} else {
			r.attempts.nacked(h.id, h.attempt)
			h.wm.Nack()
		}
	}
	return nil
}

func (r *receiver) Release(ctx context.Context, handles []any) error {
	for _, v := range handles {
		h := v.(*handle)
		r.attempts.nacked(h.id, h.attempt)
		h.wm.Nack()
	}
	return nil
}

// Close cancels the Watermill subscription and waits, within ctx, for its
// channel to close, nacking what it still delivers.
func (r *receiver) Close(ctx context.Context) error {
	r.cancel()
	for {
		select {
		case wm, ok := <-r.ch:
			if !ok {
				return nil
			}
			wm.Nack()
		case <-ctx.Done():
			return fmt.Errorf("relay/watermill: the Watermill subscription of %q did not close its channel: %w", r.topic, ctx.Err())
		}
	}
}

// attempts remembers, for the nacked messages of one subscription, how
// often they were delivered, so that a redelivery's Attempt goes on from
// there. It forgets the oldest entry beyond its limit. Safe for
// concurrent use (Receive and Settle run on different goroutines).
type attempts struct {
	mu    sync.Mutex
	limit int
	n     map[string]int
	order []string // insertion order, for forgetting the oldest
}

func newAttempts(limit int) *attempts { return &attempts{limit: limit, n: map[string]int{}} }

func (a *attempts) next(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[id] + 1
}

func (a *attempts) nacked(id string, attempt int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.n[id]; !ok {
		a.order = append(a.order, id)
	}
	a.n[id] = attempt
	for len(a.n) > a.limit && len(a.order) > 0 {
		delete(a.n, a.order[0])
		a.order = a.order[1:]
	}
}

func (a *attempts) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.n, id)
	if len(a.order) > 2*a.limit {
		// Compact: drop IDs acked since they were nacked.
		kept := a.order[:0]
		for _, x := range a.order {
			if _, ok := a.n[x]; ok {
				kept = append(kept, x)
			}
		}
		a.order = kept
	}
}
