package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/deliveryhook"
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
	// done. Errors other than ctx's are retried by the caller with backoff
	// (the receiver reconnects as needed); an error wrapping relay.ErrClosed
	// ends the subscription. A delivery that cannot be decoded is returned
	// as a message (raw bytes as payload, the problem in metadata), never
	// as an error. The caller is done with the returned slice when it
	// calls Receive again, so a receiver may reuse it.
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

// Parker is optionally implemented by a Receiver that bounds what it
// reads ahead by the messages it has delivered and not yet seen settled.
// Park is called when the shared layer starts holding handle for an
// emulated NackAfter delay, so that the receiver stops counting it: a
// message waiting out a delay holds no window slot. The handle is settled
// (a Nack) or released later as usual. Park runs under the subscription's
// lock, on the goroutine that settles: it must not block.
type Parker interface {
	Park(handle any)
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

// LagDriver is optionally implemented by a SubscribeDriver; see
// relay.LagReporter.
type LagDriver interface {
	Lag(ctx context.Context, topic string) (int64, error)
}

// Options tune the shared subscription machinery. Zero values take defaults.
type Options struct {
	// InFlight is how many unsettled messages a subscription may hold.
	// Default 64.
	InFlight int
	// ExtendEvery is the lease-extension period for Extender receivers.
	// Default 0: no extension.
	ExtendEvery time.Duration
	// BrokerTimeout bounds each Settle, Release and Extend call. Default 10s.
	BrokerTimeout time.Duration
	// CloseTimeout bounds the teardown of a subscription once its ctx is
	// done or the subscriber closes: the final settlements (with their
	// retries), the release of unsettled messages and the receiver's Close
	// share this one deadline, whatever BrokerTimeout says. What could not
	// be sent by then is logged; the broker redelivers it after its own
	// timeout. Default DefaultCloseTimeout (5s).
	CloseTimeout time.Duration
	// SettleLinger is how long settlements may wait to fill a batch of
	// SettleBatch before they are sent; they are sent at once
	// when nothing else is held. Default 1ms.
	SettleLinger time.Duration
	// SettleBatch is how many pending settlements are sent without
	// lingering (and so, with a fast handler, how many window slots are
	// freed at once for the next Receive). Default half the window, so
	// that the handler works on one half while the other is settled and
	// refilled. A driver whose receive calls cost more than its settle
	// calls may set the whole window, so that a fast handler's acks free
	// the window in one step and Receive asks for all of it. At most
	// InFlight.
	SettleBatch int
	// InFlightBytes bounds the bytes (payload, ID, Key and metadata) of
	// the unsettled messages a subscription holds, beside InFlight, so
	// that a large window is safe for large messages. Receive is asked
	// for no more messages than fit by the largest recent message size,
	// and not at all while the bound is reached; a single message larger
	// than the bound is still delivered (the window never drops below one
	// message), and a batch of messages larger than the ones before it can
	// overshoot the bound by that batch. Default DefaultInFlightBytes;
	// negative: no byte bound.
	InFlightBytes int64
	// Logger receives transient errors. Default slog.Default().
	Logger *slog.Logger
}

// DefaultInFlightBytes is the default of Options.InFlightBytes: 64 MiB,
// which lets a window of small messages fill up and bounds what a window
// of large ones holds.
const DefaultInFlightBytes = 64 << 20

func (o *Options) defaults() {
	if o.InFlight <= 0 {
		o.InFlight = 64
	}
	if o.BrokerTimeout <= 0 {
		o.BrokerTimeout = 10 * time.Second
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
	if o.SettleLinger <= 0 {
		o.SettleLinger = time.Millisecond
	}
	if o.InFlightBytes == 0 {
		o.InFlightBytes = DefaultInFlightBytes
	}
	if o.SettleBatch <= 0 {
		o.SettleBatch = max(1, o.InFlight/2)
	}
	o.SettleBatch = min(o.SettleBatch, o.InFlight)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// DefaultCloseTimeout is the default of Options.CloseTimeout and of the
// close timeout of NewPublisher.
const DefaultCloseTimeout = 5 * time.Second

// Subscriber is a relay.Subscriber over a SubscribeDriver.
type Subscriber struct {
	d    SubscribeDriver
	opts Options
	caps relay.Capabilities

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
	return &Subscriber{d: d, opts: opts, caps: d.Capabilities(), closing: closing, cancel: cancel, active: map[*subscription]struct{}{}}
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

// Subscribe implements relay.Subscriber.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *relay.Message, error) {
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
	sub := &subscription{
		parent:    s,
		topic:     topic,
		r:         r,
		ctx:       sctx,
		broker:    broker,
		brokerEnd: brokerEnd,
		cancel:    cancel,
		stopAfter: stop,
		out:       make(chan *relay.Message, s.opts.InFlight),
		free:      s.opts.InFlight,
		maxBytes:  s.opts.InFlightBytes,
		flushAt:   s.opts.SettleBatch,
		delayed:   make(map[uint64]*delayedNack),
		slotFreed: make(chan struct{}, 1),
		flushReq:  make(chan struct{}, 1),
		native:    s.caps.NativeDelay,
		maxDelay:  s.caps.MaxDelay,
		log:       s.opts.Logger.With("topic", topic, "backend", s.caps.Backend),
	}
	s.mu.Lock()
	s.active[sub] = struct{}{}
	s.mu.Unlock()
	go sub.run()
	return sub.out, nil
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

type delayedNack struct {
	handle any
	timer  *time.Timer
}

type subscription struct {
	parent *Subscriber
	topic  string
	r      Receiver
	ctx    context.Context
	cancel context.CancelFunc
	// broker is the parent of every broker call's ctx: live while the
	// subscription runs, done CloseTimeout after its teardown began.
	broker    context.Context
	brokerEnd context.CancelFunc
	stopAfter func() bool
	out       chan *relay.Message
	native    bool
	maxDelay  time.Duration
	log       *slog.Logger

	mu        sync.Mutex
	ended     bool
	free      int       // window slots: InFlight minus unsettled and unflushed settlements
	flushAt   int       // pending settlements that trigger a flush without lingering
	held      int       // slots held by pending settlements, freed once they are flushed
	bytes     int64     // bytes of the delivered, unsettled messages
	maxBytes  int64     // Options.InFlightBytes; <= 0: no byte bound
	sizeGuess int64     // the largest message size of recent batches, for sizing a Receive
	unsettled slotTable // handles of delivered messages by token
	delayed   map[uint64]*delayedNack
	pending   []Settle
	spare     []Settle // the previous batch's array, reused by pending
	recvErr   error    // latest Receive error, nil after a success
	slotFreed chan struct{}
	flushReq  chan struct{}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (s *subscription) run() {
	defer s.parent.subs.Done()
	defer s.stopAfter()
	defer func() {
		s.parent.mu.Lock()
		delete(s.parent.active, s)
		s.parent.mu.Unlock()
	}()

	flushDone := make(chan struct{})
	finish := make(chan struct{})
	go s.flushLoop(finish, flushDone)
	extendDone := make(chan struct{})
	if ext, ok := s.r.(Extender); ok && s.parent.opts.ExtendEvery > 0 {
		go s.extendLoop(ext, finish, extendDone)
	} else {
		close(extendDone)
	}

	s.receiveLoop()
	// From here on, one deadline bounds the final settlements, the release
	// and the receiver's Close.
	deadline := time.AfterFunc(s.parent.opts.CloseTimeout, s.brokerEnd)
	defer func() {
		deadline.Stop()
		s.brokerEnd()
	}()
	// The channel closes last, so that a closed channel means the broker
	// has every settlement and every released message: a new subscription
	// of the group started after it sees them.
	defer func() {
		// Messages still buffered were released with the rest; drop them
		// so nobody reads them from the closed channel.
		for {
			select {
			case <-s.out:
				continue
			default:
			}
			break
		}
		close(s.out)
	}()
	s.cancel()

	s.mu.Lock()
	s.ended = true
	release := s.unsettled.appendHandles(nil)
	for _, d := range s.delayed {
		d.timer.Stop()
		release = append(release, d.handle)
	}
	s.unsettled, s.delayed = slotTable{}, nil
	s.mu.Unlock()

	close(finish)
	<-flushDone
	<-extendDone
	if len(release) > 0 {
		ctx, cancel := context.WithTimeout(s.broker, s.parent.opts.BrokerTimeout)
		if err := s.r.Release(ctx, release); err != nil {
			s.log.Warn("relay: releasing unsettled messages failed; the broker redelivers them after its timeout", "count", len(release), "err", err)
		}
		cancel()
	}
	if err := s.r.Close(s.broker); err != nil {
		s.log.Warn("relay: closing subscription", "err", err)
	}
}

// roomLocked is how many messages the next Receive may ask for: the free
// window slots, fewer when the byte bound allows fewer messages of the
// recent size, 0 while not one more of them fits (but never 0 because of
// bytes when nothing is held, so that one message larger than the bound
// still flows). Before the first batch, when no size is known, one
// message is asked for. Called with s.mu held.
func (s *subscription) roomLocked() int {
	n := s.free
	if s.maxBytes <= 0 || n <= 0 {
		return n
	}
	if s.sizeGuess <= 0 {
		return 1
	}
	fit := (s.maxBytes - s.bytes) / s.sizeGuess
	if fit <= 0 {
		if s.unsettled.len() == 0 {
			return 1
		}
		return 0
	}
	return int(min(int64(n), fit))
}

func (s *subscription) receiveLoop() {
	var bo backoffState
	var (
		msgs   []*relay.Message // reused from batch to batch
		tokens []uint64
	)
	done := s.ctx.Done()
	for {
		s.mu.Lock()
		n := s.roomLocked()
		s.mu.Unlock()
		if n <= 0 {
			select {
			case <-s.ctx.Done():
				return
			case <-s.slotFreed:
				continue
			}
		}
		batch, err := s.r.Receive(s.ctx, n)
		if s.ctx.Err() != nil && len(batch) == 0 {
			return
		}
		if err != nil {
			if errors.Is(err, relay.ErrClosed) {
				s.log.Error("relay: subscription ended by the backend", "err", err)
				return
			}
			s.mu.Lock()
			s.recvErr = err
			s.mu.Unlock()
			s.log.Warn("relay: receive failed; retrying", "err", err, "attempt", bo.n+1)
			if !bo.sleep(s.ctx) {
				return
			}
			continue
		}
		bo.reset()
		s.mu.Lock()
		s.recvErr = nil
		s.mu.Unlock()
		msgs, tokens = msgs[:0], tokens[:0]
		var largest int64
		s.mu.Lock()
		for _, rc := range batch {
			size := int64(EncodedSize(rc.Msg))
			largest = max(largest, size)
			s.bytes += size
			tokens = append(tokens, s.unsettled.put(rc.Handle, size))
			msgs = append(msgs, rc.Msg)
		}
		s.free -= len(batch)
		s.sizeGuess = max(largest, s.sizeGuess-s.sizeGuess/8)
		s.mu.Unlock()
		// The messages are nobody else's until sent: no lock needed.
		deliveryhook.AttachBatch(msgs, deliveryhook.Params{Topic: s.topic, Ctx: s.ctx, Settler: s}, func(i int) (int, uint64) {
			return max(batch[i].Attempt, 1), tokens[i]
		})
		for i, m := range msgs {
			msgs[i] = nil
			if s.ctx.Err() != nil {
				return
			}
			select { // the common case, without the cost of a two-way select
			case s.out <- m:
				continue
			default:
			}
			select {
			case s.out <- m:
			case <-done:
				return
			}
		}
	}
}

// Settle implements Settler. It runs on the goroutine that calls
// Ack/Nack and never blocks on the broker.
func (s *subscription) Settle(id uint64, st Settlement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return relay.ErrSubscriptionEnded
	}
	h, size, ok := s.unsettled.take(id)
	if !ok {
		return relay.ErrSubscriptionEnded
	}
	if s.bytes -= size; s.maxBytes > 0 && s.bytes < s.maxBytes && s.bytes+size >= s.maxBytes {
		signal(s.slotFreed) // the byte bound no longer holds Receive back
	}

	delay := st.Delay
	if !st.Ack && delay > 0 && (!s.native || (s.maxDelay > 0 && delay > s.maxDelay)) {
		// Emulate the delay: keep the message leased, nack it later. A
		// parked message does not count against the window.
		s.free++
		signal(s.slotFreed)
		if p, ok := s.r.(Parker); ok {
			p.Park(h)
		}
		dn := &delayedNack{handle: h}
		s.delayed[id] = dn
		dn.timer = time.AfterFunc(delay, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.ended || s.delayed[id] != dn {
				return
			}
			delete(s.delayed, id)
			s.pending = append(s.pending, Settle{Handle: dn.handle})
			signal(s.flushReq)
		})
		return nil
	}
	if st.Ack {
		delay = 0
	}
	s.pending = append(s.pending, Settle{Handle: h, Ack: st.Ack, Delay: delay})
	s.held++
	// Wake the flusher for the first settlement of a batch (it then
	// lingers), and again when the batch should go without waiting.
	if len(s.pending) == 1 || s.urgentLocked() {
		signal(s.flushReq)
	}
	return nil
}

// urgentLocked reports whether pending settlements should be sent without
// lingering: the batch is big enough, or nothing else is held, so no more
// settlements are coming soon.
func (s *subscription) urgentLocked() bool {
	return len(s.pending) >= s.flushAt || s.unsettled.len() == 0
}

// flushLoop sends settlements to the broker in batches: it lingers up to
// SettleLinger for a batch to fill unless it is urgent, and settlements
// made while a Settle call is in progress join the next batch. Window slots
// are freed after the broker call, so the window bounds what the broker
// sees as unacknowledged.
func (s *subscription) flushLoop(finish <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	linger := time.NewTimer(s.parent.opts.SettleLinger)
	linger.Stop()
	for {
		final := false
		select {
		case <-s.flushReq:
		case <-finish:
			final = true
		}
		if !final {
			s.mu.Lock()
			urgent := s.urgentLocked()
			s.mu.Unlock()
			if !urgent {
				linger.Reset(s.parent.opts.SettleLinger)
				select {
				case <-linger.C:
				case <-s.flushReq:
				case <-finish:
					final = true
				}
				linger.Stop()
			}
		}
		for {
			s.mu.Lock()
			batch, held := s.pending, s.held
			if len(batch) == 0 {
				s.mu.Unlock()
				break
			}
			s.pending, s.spare, s.held = s.spare[:0], nil, 0
			s.mu.Unlock()
			s.sendSettlements(batch)
			clear(batch) // drop the handles
			s.mu.Lock()
			s.free += held
			if s.spare == nil && cap(batch) <= 2*s.parent.opts.InFlight {
				s.spare = batch[:0]
			}
			s.mu.Unlock()
			signal(s.slotFreed)
		}
		if final {
			return
		}
	}
}

func (s *subscription) sendSettlements(batch []Settle) {
	var bo backoffState
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(s.broker, s.parent.opts.BrokerTimeout)
		err := s.r.Settle(ctx, batch)
		cancel()
		if err == nil {
			return
		}
		if try == 3 || errors.Is(err, relay.ErrClosed) || s.broker.Err() != nil {
			s.log.Warn("relay: settling messages failed; the broker will redeliver them", "count", len(batch), "err", err)
			return
		}
		s.log.Debug("relay: settle failed; retrying", "err", err)
		bo.sleep(s.broker)
	}
}

func (s *subscription) extendLoop(ext Extender, finish <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(s.parent.opts.ExtendEvery)
	defer t.Stop()
	for {
		select {
		case <-finish:
			return
		case <-t.C:
		}
		s.mu.Lock()
		handles := s.unsettled.appendHandles(make([]any, 0, s.unsettled.len()+len(s.delayed)))
		for _, d := range s.delayed {
			handles = append(handles, d.handle)
		}
		s.mu.Unlock()
		if len(handles) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(s.broker, s.parent.opts.BrokerTimeout)
		if err := ext.Extend(ctx, handles); err != nil {
			s.log.Warn("relay: extending message leases failed", "count", len(handles), "err", err)
		}
		cancel()
	}
}
