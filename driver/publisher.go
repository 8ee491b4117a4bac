package driver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-relay/relay"
)

// Publisher is a relay.Publisher over a PublishDriver.
type Publisher struct {
	d     PublishDriver
	caps  relay.Capabilities
	grace time.Duration
	stamp bool // the driver holds delayed messages until due (DueHolder)

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	kill     context.Context // cancelled when Close gives up waiting
	cancel   context.CancelFunc
	slots    chan struct{} // one per PublishAsync call in flight
	closeErr error
	done     chan struct{}
	// pause waits out a backoff delay before a message is sent again,
	// or until ctx is done; it reports whether the delay passed. A
	// field so that tests can observe the delays.
	pause func(ctx context.Context, d time.Duration) bool
}

// NewPublisher wraps d. Close waits up to closeGrace (default
// DefaultCloseTimeout, 5s) for Publish calls in progress before cancelling
// them; see Close.
func NewPublisher(d PublishDriver, closeGrace time.Duration) *Publisher {
	if closeGrace <= 0 {
		closeGrace = DefaultCloseTimeout
	}
	kill, cancel := context.WithCancel(context.Background())
	return &Publisher{d: d, caps: d.Capabilities(), grace: closeGrace, stamp: holdsUntilDue(d), kill: kill, cancel: cancel,
		slots: make(chan struct{}, DefaultAsyncInFlight), done: make(chan struct{}), pause: sleepCtx}
}

// Driver returns the wrapped driver (for adapter-specific extensions).
func (p *Publisher) Driver() PublishDriver { return p.d }

// Capabilities reports the driver's capabilities.
func (p *Publisher) Capabilities() relay.Capabilities { return p.caps }

// Health implements relay.HealthChecker: ErrClosed after Close, otherwise
// the driver's own health when it implements relay.HealthChecker.
func (p *Publisher) Health() error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return relay.ErrClosed
	}
	if h, ok := p.d.(relay.HealthChecker); ok {
		return h.Health()
	}
	return nil
}

// Publish implements relay.Publisher.
func (p *Publisher) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	return p.call(ctx, func(ctx context.Context) error {
		if err := p.validate(topic, msgs); err != nil {
			return err
		}
		if len(msgs) == 0 {
			return nil
		}
		if p.stamp {
			msgs = stampDue(msgs)
		}
		return p.send(ctx, topic, msgs)
	})
}

// call runs fn, the work of a Publish (or CheckGroups, PublishToGroup)
// call: ErrClosed after Close, which waits for fn; fn's ctx is also
// cancelled when Close gives up waiting.
func (p *Publisher) call(ctx context.Context, fn func(ctx context.Context) error) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return relay.ErrClosed
	}
	p.inflight.Add(1)
	p.mu.Unlock()
	defer p.inflight.Done()
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.kill, cancel)
	defer stop()
	return fn(ctx)
}

// send sends msgs, which passed validate, with the driver's SendAll when
// it is a WholeSender, else with sendBatches and its SendBatch.
func (p *Publisher) send(ctx context.Context, topic string, msgs []*relay.Message) error {
	ws, ok := p.d.(WholeSender)
	if !ok {
		return p.sendBatches(ctx, topic, msgs, p.d.SendBatch)
	}
	failed, whole := p.sendRetrying(ctx, topic, msgs, ws.SendAll)
	if whole != nil {
		return whole
	}
	if len(failed) > 0 {
		return &relay.PublishError{Failed: failed}
	}
	return nil
}

// sendBatches sends msgs in batches of the driver's MaxBatch, each made by
// attempt and sent again as the driver's Retryable errors allow (see
// sendRetrying) before the next, and combines the batches' outcomes as
// Publish reports them.
func (p *Publisher) sendBatches(ctx context.Context, topic string, msgs []*relay.Message, attempt attemptFunc) error {
	size := p.caps.MaxBatch
	if size <= 0 {
		size = len(msgs)
	}
	var failed []relay.MessageFailure
	for start := 0; start < len(msgs); start += size {
		end := min(start+size, len(msgs))
		f, whole := p.sendRetrying(ctx, topic, msgs[start:end], attempt)
		if whole == nil {
			failed = append(failed, f...)
			continue
		}
		if start == 0 {
			// The first batch failed as a whole and the rest is not sent:
			// nothing was accepted, all for one reason, the plain error.
			return whole
		}
		failed = appendFailed(failed, msgs[start:], whole)
		break
	}
	if len(failed) > 0 {
		return &relay.PublishError{Failed: failed}
	}
	return nil
}

func (p *Publisher) validate(topic string, msgs []*relay.Message) error {
	if topic == "" {
		return fmt.Errorf("%w: empty", relay.ErrInvalidTopic)
	}
	if tv, ok := p.d.(TopicValidator); ok {
		if err := tv.ValidateTopic(topic); err != nil {
			return err
		}
	}
	mv, _ := p.d.(MessageValidator)
	var now time.Time // read once, and only when a message asks for a delay
	for i, m := range msgs {
		if m == nil {
			return relay.NilMessageError(i)
		}
		if now.IsZero() && !m.DeliverAt.IsZero() {
			now = time.Now()
		}
		if m.ID == "" {
			m.ID = relay.NewID()
		}
		if err := CheckSize(m, p.caps); err != nil {
			return err
		}
		if err := CheckDelay(m, p.caps, now); err != nil {
			return err
		}
		if mv != nil {
			if err := mv.ValidateMessage(topic, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close implements relay.Publisher: it refuses new Publish calls, waits up
// to the grace period for those in progress, cancels the rest, then closes
// the driver. It returns within the grace period plus the time SendBatch
// takes to return once its ctx is cancelled plus the driver's Close, so
// drivers must honour ctx in SendBatch and not block on the broker in
// Close. Idempotent; later calls return the first result.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return p.closeErr
	}
	p.closed = true
	p.mu.Unlock()

	waited := make(chan struct{})
	go func() { p.inflight.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(p.grace):
		p.cancel()
		<-waited
	}
	p.cancel()
	p.closeErr = p.d.Close()
	close(p.done)
	return p.closeErr
}
