package driver

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-relay/relay"
)

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

// Group implements relay.GroupNamer: Options.Group.
func (s *Subscriber) Group() string { return s.opts.Group }

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

// ReadHistory implements relay.HistoryReader; an error wrapping
// relay.ErrNotSupported if the driver keeps no history.
func (s *Subscriber) ReadHistory(ctx context.Context, topic string, w relay.Window, fn func(relay.Stored) error) error {
	if s.isClosed() {
		return relay.ErrClosed
	}
	if topic == "" {
		return fmt.Errorf("%w: empty", relay.ErrInvalidTopic)
	}
	h, ok := s.d.(HistoryDriver)
	if !ok {
		return fmt.Errorf("%w: %s keeps no history readable without consuming", relay.ErrNotSupported, s.caps.Backend)
	}
	return h.ReadHistory(ctx, topic, w, fn)
}

// Assignment implements relay.AssignmentReporter; ErrNotSupported if the
// driver cannot tell.
func (s *Subscriber) Assignment(topic string) (relay.Assignment, error) {
	if s.isClosed() {
		return relay.Assignment{}, relay.ErrClosed
	}
	a, ok := s.d.(AssignmentDriver)
	if !ok {
		return relay.Assignment{}, relay.ErrNotSupported
	}
	return a.Assignment(topic)
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
	window, maxWindow, flushAt := s.opts.InFlight, s.opts.MaxInFlight, s.opts.SettleBatch
	if l, ok := r.(WindowLimiter); ok {
		if n := l.WindowLimit(); n > 0 && n < window {
			// The settlement batch keeps its share of the window.
			flushAt = max(1, flushAt*n/window)
			window = n
		}
		if n := l.WindowLimit(); n > 0 {
			maxWindow = min(maxWindow, n)
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
		maxWindow: max(window, maxWindow),
		free:      window,
		maxBytes:  s.opts.InFlightBytes,
		flushAt:   flushAt,
		delayed:   make(map[uint64]*delayedNack),
		slotFreed: make(chan struct{}, 1),
		flushReq:  make(chan struct{}, 1),
		commitReq: make(chan struct{}, 1),
		native:    s.caps.NativeDelay,
		maxDelay:  s.caps.MaxDelay,
		hold:      s.hold,
		log:       s.opts.Logger.With("topic", topic, "backend", s.caps.Backend),
	}
	sub.committer, _ = r.(Committer)
	// A batch holds at least one message, so a buffer of window batches
	// never blocks the receive loop before the window does, however far
	// the window grows.
	if batches {
		sub.outBatches = make(chan []*relay.Message, sub.maxWindow)
	} else {
		sub.out = make(chan *relay.Message, sub.maxWindow)
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
