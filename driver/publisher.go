package driver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-relay/relay"
)

// PublishDriver is the broker-specific half of a Publisher.
type PublishDriver interface {
	// SendBatch makes one attempt to send msgs to topic and returns once
	// the broker accepted every one of them (nil), or an error. Partial
	// failure is reported as a *relay.PublishError naming the failed
	// messages. The batch is at most Capabilities().MaxBatch long (when
	// non-zero) and passed the limit checks. SendBatch is called
	// concurrently.
	//
	// SendBatch does not retry: it classifies. A failure worth sending
	// again (the connection down, the broker restarting, no answer in
	// time, throttling) is marked with Retryable: as the whole error, when
	// none of the batch was accepted for sure and all of it may be sent
	// again; as the Err of an entry of the *relay.PublishError, for the
	// messages that may be sent again (never mark one whose resending
	// could break an order the driver declares). The Publisher sends
	// exactly the marked messages again, in their order, with its one
	// backoff policy, until they are accepted or ctx ends, and then
	// reports them failed with "relay/<Backend>: <ctx error> (last error:
	// <the last marked error>)", wrapping both. Unmarked failures are
	// reported at once as they are. A message sent again may be stored
	// twice when an attempt's outcome was in doubt (at-least-once), unless
	// the broker deduplicates by ID.
	//
	// SendBatch and the driver's encoders only read the messages: they
	// must not write a message's Metadata map or Payload, since callers
	// may share them between messages and calls (relay.Publisher promises
	// so; the bridge's copies share one map).
	SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error
	Capabilities() relay.Capabilities
	// Close releases the connection. Called once, after every SendBatch
	// returned. It must not wait on the broker for long (Publisher.Close
	// counts on it to keep its time bound).
	Close() error
}

// SendError is what a SendBatch, SendAll or SendBatchAsync outcome
// reports for one send of n messages, of which failed did not make it
// (in the batch's order): nil when none failed; the plain error when all
// n failed with errors of one text and one Retryable mark that
// perMessage does not claim (the connection down, the broker refusing
// the call: nothing about any one message, so the caller gets the cause
// itself); otherwise a *relay.PublishError naming each failed message.
// perMessage reports the errors that belong to their message even when
// every message has one (unroutable, rejected, too large); nil means
// none does. The adapters of this module that can fail part of a send
// report through it, so that one rule decides between the two shapes.
func SendError(n int, failed []relay.MessageFailure, perMessage func(error) bool) error {
	if len(failed) == 0 {
		return nil
	}
	first := failed[0].Err
	if len(failed) == n && first != nil && (perMessage == nil || !perMessage(first)) {
		text, retry := first.Error(), IsRetryable(first)
		same := true
		for _, f := range failed[1:] {
			// By text, not ==: comparing errors of a non-comparable
			// dynamic type (a struct holding a slice) would panic.
			if f.Err == nil || f.Err.Error() != text || IsRetryable(f.Err) != retry {
				same = false
				break
			}
		}
		if same {
			return first
		}
	}
	return &relay.PublishError{Failed: failed}
}

// MessageValidator is optionally implemented by a PublishDriver that has
// limits beyond the generic size check (name charset, encoded size, ...).
// It is called for every message before anything of a Publish call is
// sent, and like SendBatch it only reads the message.
type MessageValidator interface {
	ValidateMessage(topic string, m *relay.Message) error
}

// TopicValidator is optionally implemented by drivers with topic naming rules.
type TopicValidator interface {
	ValidateTopic(topic string) error
}

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

// CheckDelay refuses a message whose DeliverAt (compared with now) the
// backend of caps cannot honour: ErrDelayUnsupported when it has no
// delayed delivery, a *relay.LimitError ("delivery delay", in whole
// seconds) beyond MaxDeliverDelay. A zero or past DeliverAt always passes.
func CheckDelay(m *relay.Message, caps relay.Capabilities, now time.Time) error {
	delay, ok := Delay(m, now)
	if !ok {
		return nil
	}
	if caps.DelayedDelivery == relay.DelayNone {
		return fmt.Errorf("relay/%s: message %s due in %v: %w", caps.Backend, m.ID, delay.Round(time.Millisecond), relay.ErrDelayUnsupported)
	}
	if caps.MaxDeliverDelay > 0 && delay > caps.MaxDeliverDelay {
		return &relay.LimitError{MessageID: m.ID, What: "delivery delay",
			Detail: fmt.Sprintf("due in %v, beyond the %s limit of %v", delay.Round(time.Second), caps.Backend, caps.MaxDeliverDelay)}
	}
	return nil
}

// Delay is how long from now m is to wait before delivery, and whether it
// is to wait at all (false for a zero or past DeliverAt). For drivers: a
// message with ok false is sent as usual.
func Delay(m *relay.Message, now time.Time) (delay time.Duration, ok bool) {
	if m.DeliverAt.IsZero() {
		return 0, false
	}
	delay = m.DeliverAt.Sub(now)
	return delay, delay > 0
}

// CheckSize applies the generic limits of caps to m: MaxMessageBytes over
// payload, ID, Key and metadata (see SizeError), and MaxMetadataKeys.
func CheckSize(m *relay.Message, caps relay.Capabilities) error {
	if caps.MaxMetadataKeys > 0 && len(m.Metadata) > caps.MaxMetadataKeys {
		return &relay.LimitError{MessageID: m.ID, What: "metadata keys", Limit: caps.MaxMetadataKeys, Actual: len(m.Metadata)}
	}
	return SizeError(m, EncodedSize(m), caps)
}

// SizeError is nil when caps has no MaxMessageBytes or size, m's size as
// the backend counts it, is within it; otherwise a *relay.LimitError that
// names what sets the limit (caps.MaxMessageBytesSetBy) and what was
// measured: the payload (Actual: the payload's length) when the payload
// alone exceeds the limit, else the message size (Actual: size, Payload:
// the payload's length). Every size limit of this module's adapters is
// reported through it, by CheckSize or by a MessageValidator that counts
// size its own way.
func SizeError(m *relay.Message, size int, caps relay.Capabilities) error {
	limit := caps.MaxMessageBytes
	if limit <= 0 || size <= limit {
		return nil
	}
	if len(m.Payload) > limit {
		return &relay.LimitError{MessageID: m.ID, What: "payload", Limit: limit, Actual: len(m.Payload), SetBy: caps.MaxMessageBytesSetBy}
	}
	return &relay.LimitError{MessageID: m.ID, What: "message size", Limit: limit, Actual: size, Payload: len(m.Payload), SetBy: caps.MaxMessageBytesSetBy}
}

// EncodedSize is the byte count of payload, ID, Key and metadata keys and values.
func EncodedSize(m *relay.Message) int {
	n := len(m.Payload) + len(m.ID) + len(m.Key)
	for k, v := range m.Metadata {
		n += len(k) + len(v)
	}
	return n
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
