package driver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-relay/relay"
)

// Received is one message a Receiver took from the broker.
type Received struct {
	// Msg has ID, Key, Metadata and Payload set; it must not be delivered yet.
	Msg *relay.Message
	// Attempt is the broker's delivery count (1 = first); 0 is taken as 1.
	Attempt int
	// Handle is the adapter's token for settling this message.
	Handle any
}

// Settle is one settlement passed to Receiver.Settle.
type Settle struct {
	Handle any
	Ack    bool
	// Delay before redelivery of a Nack. Non-zero only when the driver
	// declares Capabilities().NativeDelay; otherwise the shared layer holds
	// the message for the delay and then passes a Nack with Delay 0.
	Delay time.Duration
}

// Receiver is the broker side of one subscription (one topic, one group).
type Receiver interface {
	// Receive blocks until it has between 1 and max messages or ctx is
	// done. A receiver whose broker call can end with nothing (a long poll
	// that timed out empty) may return no messages and a nil error then:
	// the caller calls again, and counts the call a success (Health clears
	// the error of an earlier failed call), which a call that keeps
	// waiting for messages cannot tell it. Errors other than ctx's are
	// retried by the caller with backoff
	// (the receiver reconnects as needed); an error wrapping relay.ErrClosed
	// ends the subscription. A delivery that cannot be decoded is returned
	// as a message (raw bytes as payload, the problem in metadata), never
	// as an error; messages are never returned together with an error.
	// The caller is done with the returned slice when it calls Receive
	// again, so a receiver may reuse it (not one that implements
	// ReceiveLimiter with more than one call at once: its calls overlap).
	Receive(ctx context.Context, max int) ([]Received, error)
	// Settle applies acks and nacks, in settlement order, with as few
	// broker calls as it can. It is called from one goroutine. The batch
	// slice is reused once Settle returns: keep no reference to it.
	Settle(ctx context.Context, batch []Settle) error
	// Release hands unsettled messages back to the group at once; called
	// when the subscription ends, after the last Settle.
	Release(ctx context.Context, handles []any) error
	// Close ends the broker-side subscription; called last, after Receive
	// returned for good. ctx carries the deadline of the subscription's
	// teardown (Options.CloseTimeout after it began): Close gives up on
	// broker calls when it is done, and returns soon after.
	Close(ctx context.Context) error
}

// ReceiveLimiter is optionally implemented by a Receiver whose broker
// caps the messages of one receive call and delivers faster with several
// calls in flight (SQS's ReceiveMessage returns at most ten). maxPerCall
// (when positive) bounds the max passed to Receive; concurrent (when above
// one) is how many Receive calls the subscription keeps in flight at once,
// from as many goroutines, each asking for part of the free window, so that
// together they never ask for more than the window holds. A receiver that
// implements it must allow those concurrent Receive calls; the order of
// messages across calls is then not kept, so a receiver that must keep an
// order (a FIFO queue) declares 1. It is called once per subscription.
type ReceiveLimiter interface {
	ReceiveLimits() (maxPerCall, concurrent int)
}

// WindowLimiter is optionally implemented by a Receiver whose broker
// bounds the unsettled messages of the whole group (NATS JetStream's
// max_ack_pending): a positive WindowLimit below Options.InFlight becomes
// the subscription's window, so that one member of the group cannot hold
// what the others need. It is called once, before the first Receive; the
// receiver says why it limits (a log line) itself.
type WindowLimiter interface {
	WindowLimit() int
}

// Extender is optionally implemented by a Receiver whose broker leases
// messages for a limited time (SQS visibility, Redis idle time). Extend is
// called every Options.ExtendEvery with the handles of every message held
// by the subscription, so that slow work is not redelivered meanwhile.
type Extender interface {
	Extend(ctx context.Context, handles []any) error
}

// SubscribeDriver is the broker-specific half of a Subscriber.
type SubscribeDriver interface {
	// Subscribe starts a subscription of topic for the driver's group.
	// ctx is the subscription's lifetime.
	Subscribe(ctx context.Context, topic string) (Receiver, error)
	Capabilities() relay.Capabilities
	// Close releases the connection; called once, after every Receiver
	// closed. It must not wait on the broker for long: it comes after the
	// subscriptions' teardown deadline, and Subscriber.Close counts on it
	// to keep its time bound.
	Close() error
}

// ProvisionDriver is optionally implemented by a SubscribeDriver; see
// relay.Provisioner.
type ProvisionDriver interface {
	Provision(ctx context.Context, topic string) error
}

// RemoveTopicDriver is optionally implemented by a SubscribeDriver that can
// delete a topic and the subscriber's group state for it from the broker;
// see Subscriber.RemoveTopic.
type RemoveTopicDriver interface {
	RemoveTopic(ctx context.Context, topic string) error
}

// LagDriver is optionally implemented by a SubscribeDriver; see
// relay.LagReporter.
type LagDriver interface {
	Lag(ctx context.Context, topic string) (int64, error)
}

// Subscriber is a relay.Subscriber over a SubscribeDriver.
type Subscriber struct {
	d    SubscribeDriver
	opts Options
	caps relay.Capabilities
	// hold: the driver holds delayed messages until due (DueHolder, with
	// a native NackAfter); holds counts what was held.
	hold  bool
	holds holds

	closing context.Context
	cancel  context.CancelFunc

	mu     sync.Mutex
	closed bool
	active map[*subscription]struct{}
	subs   sync.WaitGroup
	once   sync.Once
	err    error
}

// NewSubscriber wraps d.
func NewSubscriber(d SubscribeDriver, opts Options) *Subscriber {
	opts.defaults()
	closing, cancel := context.WithCancel(context.Background())
	caps := d.Capabilities()
	return &Subscriber{d: d, opts: opts, caps: caps, hold: caps.NativeDelay && holdsUntilDue(d),
		closing: closing, cancel: cancel, active: map[*subscription]struct{}{}}
}

// Health implements relay.HealthChecker: ErrClosed after Close; the
// driver's own health when it implements relay.HealthChecker; otherwise
// the error of any subscription whose latest receive attempt failed.
func (s *Subscriber) Health() error {
	s.mu.Lock()
	closed := s.closed
	subs := make([]*subscription, 0, len(s.active))
	for sub := range s.active {
		subs = append(subs, sub)
	}
	s.mu.Unlock()
	if closed {
		return relay.ErrClosed
	}
	if h, ok := s.d.(relay.HealthChecker); ok {
		if err := h.Health(); err != nil {
			return err
		}
	}
	for _, sub := range subs {
		sub.mu.Lock()
		err := sub.recvErr
		sub.mu.Unlock()
		if err != nil {
			return fmt.Errorf("subscription to %q: %w", sub.topic, err)
		}
	}
	return nil
}

// Driver returns the wrapped driver.
func (s *Subscriber) Driver() SubscribeDriver { return s.d }

// Capabilities reports the driver's capabilities.
func (s *Subscriber) Capabilities() relay.Capabilities { return s.caps }

// Provision implements relay.Provisioner; ErrNotSupported if the driver
// cannot provision.
func (s *Subscriber) Provision(ctx context.Context, topic string) error {
	if s.isClosed() {
		return relay.ErrClosed
	}
	if topic == "" {
		return fmt.Errorf("%w: empty", relay.ErrInvalidTopic)
	}
	p, ok := s.d.(ProvisionDriver)
	if !ok {
		return relay.ErrNotSupported
	}
	return p.Provision(ctx, topic)
}

// RemoveTopic deletes topic and the subscriber's group state for it from
// the broker (package reqreply removes its reply topics with it);
// ErrNotSupported if the driver cannot. It is idempotent (a missing topic
// is not an error) and must not be called while topic is subscribed: every
// group's messages of topic are gone, not only this subscriber's.
func (s *Subscriber) RemoveTopic(ctx context.Context, topic string) error {
	if s.isClosed() {
		return relay.ErrClosed
	}
	if topic == "" {
		return fmt.Errorf("%w: empty", relay.ErrInvalidTopic)
	}
	r, ok := s.d.(RemoveTopicDriver)
	if !ok {
		return relay.ErrNotSupported
	}
	return r.RemoveTopic(ctx, topic)
}

// Lag implements relay.LagReporter; ErrNotSupported if the driver cannot
// tell.
func (s *Subscriber) Lag(ctx context.Context, topic string) (int64, error) {
	if s.isClosed() {
		return 0, relay.ErrClosed
	}
	if topic == "" {
		return 0, fmt.Errorf("%w: empty", relay.ErrInvalidTopic)
	}
	l, ok := s.d.(LagDriver)
	if !ok {
		return 0, relay.ErrNotSupported
	}
	return l.Lag(ctx, topic)
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// BatchSubscriber is the batch path of the shared layer, which Subscriber
// implements: consumers that take messages in batches (the router's batch
// handlers, the bridge) receive each batch the broker returned as one
// channel operation instead of one per message. Wrappers of a Subscriber
// should pass it through.
type BatchSubscriber interface {
	// SubscribeBatches is Subscribe with messages delivered in batches:
	// each slice holds at least one message, in delivery order, and is the
	// receiver's to keep. Batches are as large as the broker returned
	// them (at most the in-flight window), so a consumer that wants a
	// fixed size splits or joins them. Everything else (the window,
	// settlement, the end of the subscription) is as for Subscribe.
	SubscribeBatches(ctx context.Context, topic string) (<-chan []*relay.Message, error)
}

// Subscribe implements relay.Subscriber.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *relay.Message, error) {
	sub, err := s.subscribe(ctx, topic, false)
	if err != nil {
		return nil, err
	}
	return sub.out, nil
}

// SubscribeBatches implements BatchSubscriber.
func (s *Subscriber) SubscribeBatches(ctx context.Context, topic string) (<-chan []*relay.Message, error) {
	sub, err := s.subscribe(ctx, topic, true)
	if err != nil {
		return nil, err
	}
	return sub.outBatches, nil
}

func (s *Subscriber) subscribe(ctx context.Context, topic string, batches bool) (*subscription, error) {
	if topic == "" {
		return nil, fmt.Errorf("%w: empty", relay.ErrInvalidTopic)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, relay.ErrClosed
	}
	s.subs.Add(1)
	s.mu.Unlock()

	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	broker, brokerEnd := context.WithCancel(context.Background())
	r, err := s.d.Subscribe(sctx, topic)
	if err != nil {
		stop()
		cancel()
		brokerEnd()
		s.subs.Done()
		return nil, err
	}
	window, flushAt := s.opts.InFlight, s.opts.SettleBatch
	if l, ok := r.(WindowLimiter); ok {
		if n := l.WindowLimit(); n > 0 && n < window {
			// The settlement batch keeps its share of the window.
			flushAt = max(1, flushAt*n/window)
			window = n
		}
	}
	sub := &subscription{
		parent:    s,
		topic:     topic,
		r:         r,
		ctx:       sctx,
		broker:    broker,
		brokerEnd: brokerEnd,
		cancel:    cancel,
		stopAfter: stop,
		window:    window,
		free:      window,
		maxBytes:  s.opts.InFlightBytes,
		flushAt:   flushAt,
		delayed:   make(map[uint64]*delayedNack),
		slotFreed: make(chan struct{}, 1),
		flushReq:  make(chan struct{}, 1),
		native:    s.caps.NativeDelay,
		maxDelay:  s.caps.MaxDelay,
		hold:      s.hold,
		log:       s.opts.Logger.With("topic", topic, "backend", s.caps.Backend),
	}
	// A batch holds at least one message, so a buffer of window batches
	// never blocks the receive loop before the window does.
	if batches {
		sub.outBatches = make(chan []*relay.Message, window)
	} else {
		sub.out = make(chan *relay.Message, window)
	}
	s.mu.Lock()
	s.active[sub] = struct{}{}
	s.mu.Unlock()
	go sub.run()
	return sub, nil
}

// Close implements relay.Subscriber: every subscription ends, its channel
// closes, pending settlements are flushed and unsettled messages released;
// then the driver closes. The subscriptions end in parallel, each within
// Options.CloseTimeout of its end once its Receive returned (the receiver
// must return from Receive when its ctx is done), so Close returns within
// CloseTimeout plus the driver's Close. Idempotent.
func (s *Subscriber) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		s.subs.Wait()
		s.err = s.d.Close()
	})
	return s.err
}
