package reqreply

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-relay/relay"
)

// DefaultTimeout bounds a Request whose ctx has no deadline.
const DefaultTimeout = 30 * time.Second

// ReplyTopicPrefix starts the name of every reply topic a Requester
// creates; a random suffix follows.
const ReplyTopicPrefix = "relay-reply-"

// Option configures a Requester.
type Option func(*config)

type config struct {
	timeout  time.Duration
	noDirect bool
}

// WithDefaultTimeout sets the bound of a Request whose ctx has no deadline
// (default DefaultTimeout). d must be positive.
func WithDefaultTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithoutDirectReply makes the requester use a reply topic even when the
// publisher offers a direct reply channel (DirectReplier).
func WithoutDirectReply() Option { return func(c *config) { c.noDirect = true } }

// Stats are a Requester's counters since NewRequester.
type Stats struct {
	Sent         uint64 // requests published
	Answered     uint64 // requests that got their reply (RemoteErrors included)
	RemoteErrors uint64 // replies that carried ErrorKey
	TimedOut     uint64 // requests whose ctx ended before the reply came
	// Late counts replies that found no waiting caller: it gave up (ctx
	// done), or the reply is a duplicate or carries an unknown
	// correlation ID. They are dropped (acked).
	Late     uint64
	InFlight int // requests waiting for their reply now
}

// Requester publishes requests and waits for their replies. Many requests
// may be in flight at once; replies are matched by CorrelationIDKey. A
// Requester is safe for concurrent use.
type Requester struct {
	cfg     config
	pub     relay.Publisher // where requests are published
	direct  relay.Publisher // the direct reply channel, or nil
	sub     relay.Subscriber
	replyTo string // the reply topic, "" with a direct reply channel

	mu      sync.Mutex
	pending map[string]chan *relay.Message
	closed  bool

	closing   chan struct{}
	cancelSub context.CancelFunc
	loopDone  chan struct{}
	closeOnce sync.Once
	closeErr  error

	sent, answered, remoteErrs, timedOut, late atomic.Uint64
}

// NewRequester returns a requester that publishes requests with pub and
// receives the replies on a direct reply channel where pub offers one
// (DirectReplier), and otherwise on a reply topic of its own that it
// provisions (relay.Provisioner) and subscribes to with sub, within ctx.
// sub may be nil when pub offers a direct reply channel. The requester does
// not close pub or sub: close them after Close.
func NewRequester(ctx context.Context, pub relay.Publisher, sub relay.Subscriber, opts ...Option) (*Requester, error) {
	cfg := config{timeout: DefaultTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if pub == nil {
		return nil, errors.New("relay/reqreply: publisher is nil")
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("relay/reqreply: default timeout %v is not positive", cfg.timeout)
	}
	r := &Requester{
		cfg:      cfg,
		pub:      pub,
		sub:      sub,
		pending:  map[string]chan *relay.Message{},
		closing:  make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	if dr, ok := pub.(DirectReplier); ok && !cfg.noDirect {
		direct, err := dr.DirectReply(ctx, r.deliver)
		if err != nil {
			return nil, fmt.Errorf("relay/reqreply: opening the direct reply channel: %w", err)
		}
		r.direct, r.pub = direct, direct
		close(r.loopDone)
		return r, nil
	}
	if sub == nil {
		return nil, errors.New("relay/reqreply: the publisher has no direct reply channel, so a subscriber for the reply topic is needed")
	}
	r.replyTo = ReplyTopicPrefix + randomSuffix()
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(ctx, r.replyTo); err != nil {
			return nil, fmt.Errorf("relay/reqreply: provisioning reply topic %q: %w", r.replyTo, err)
		}
	}
	subCtx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(subCtx, r.replyTo)
	if err != nil {
		cancel()
		r.remove()
		return nil, fmt.Errorf("relay/reqreply: subscribing to reply topic %q: %w", r.replyTo, err)
	}
	r.cancelSub = cancel
	go func() {
		defer close(r.loopDone)
		for m := range ch {
			_ = m.Ack()
			r.deliver(m)
		}
	}()
	return r, nil
}

// randomSuffix is the random tail of a UUIDv7: valid in every backend's
// names.
func randomSuffix() string {
	id := strings.ReplaceAll(relay.NewID(), "-", "")
	return id[len(id)-16:]
}

// ReplyTopic returns the requester's reply topic, or "" when it uses a
// direct reply channel.
func (r *Requester) ReplyTopic() string { return r.replyTo }

// Request publishes msg to topic as a request and returns its reply. It
// blocks until the reply arrives, ctx is done (then the error wraps
// ctx.Err(), e.g. context.DeadlineExceeded) or the requester closes
// (relay.ErrClosed). A ctx without deadline is bounded by the default
// timeout (WithDefaultTimeout). A reply that carries ErrorKey is returned
// with a *RemoteError. msg is not modified: the request published is a copy
// of its Key, Metadata and Payload with ReplyToKey and a fresh
// CorrelationIDKey added, under a message ID of its own that equals the
// correlation ID (msg.ID is not used). So every call is a request of its
// own, also when a caller retries with the same message: a broker that
// drops a message ID it has seen (NATS JetStream's duplicate window,
// relay.Capabilities.DeduplicatesByID) would otherwise drop the retry and
// leave the caller waiting until ctx ends. Safe for concurrent use.
func (r *Requester) Request(ctx context.Context, topic string, msg *relay.Message) (*relay.Message, error) {
	if msg == nil {
		return nil, errors.New("relay/reqreply: request message is nil")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.timeout)
		defer cancel()
	}
	corr := relay.NewID()
	md := msg.Metadata.Clone()
	if md == nil {
		md = relay.Metadata{}
	}
	md[CorrelationIDKey] = corr
	if dl, ok := ctx.Deadline(); ok {
		md[DeadlineKey] = dl.UTC().Format(time.RFC3339Nano)
	}
	if r.replyTo != "" {
		md[ReplyToKey] = r.replyTo
	}
	req := &relay.Message{ID: corr, Key: msg.Key, Metadata: md, Payload: msg.Payload}
	ch := make(chan *relay.Message, 1)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("relay/reqreply: request to %q: %w", topic, relay.ErrClosed)
	}
	r.pending[corr] = ch
	r.mu.Unlock()

	if err := r.pub.Publish(ctx, topic, req); err != nil {
		r.forget(corr)
		return nil, fmt.Errorf("relay/reqreply: publishing request %s to %q: %w", req.ID, topic, err)
	}
	r.sent.Add(1)
	select {
	case rep := <-ch:
		return r.answer(rep)
	case <-ctx.Done():
		if !r.forget(corr) {
			// The reply was handed over as ctx ended: take it.
			return r.answer(<-ch)
		}
		r.timedOut.Add(1)
		return nil, fmt.Errorf("relay/reqreply: no reply to request %s on %q: %w", req.ID, topic, ctx.Err())
	case <-r.closing:
		if !r.forget(corr) {
			return r.answer(<-ch)
		}
		return nil, fmt.Errorf("relay/reqreply: request %s to %q: %w", req.ID, topic, relay.ErrClosed)
	}
}

func (r *Requester) answer(rep *relay.Message) (*relay.Message, error) {
	r.answered.Add(1)
	if text, ok := rep.Metadata[ErrorKey]; ok {
		r.remoteErrs.Add(1)
		return nil, &RemoteError{Message: text, Reply: rep}
	}
	return rep, nil
}

// forget removes the pending entry of corr and reports whether it was
// still there (false: a reply was delivered to it).
func (r *Requester) forget(corr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.pending[corr]
	delete(r.pending, corr)
	return ok
}

// deliver hands a received reply to its waiting caller or counts it late.
func (r *Requester) deliver(m *relay.Message) {
	corr := m.Metadata.Get(CorrelationIDKey)
	r.mu.Lock()
	ch, ok := r.pending[corr]
	if ok {
		delete(r.pending, corr)
		ch <- m // buffered, one reply per entry
	}
	r.mu.Unlock()
	if !ok {
		r.late.Add(1)
	}
}

// Stats returns the requester's counters. Safe for concurrent use.
func (r *Requester) Stats() Stats {
	r.mu.Lock()
	inFlight := len(r.pending)
	r.mu.Unlock()
	return Stats{
		Sent: r.sent.Load(), Answered: r.answered.Load(), RemoteErrors: r.remoteErrs.Load(),
		TimedOut: r.timedOut.Load(), Late: r.late.Load(), InFlight: inFlight,
	}
}

// Close fails the requests in flight with relay.ErrClosed, ends the reply
// subscription or channel, and removes the reply topic where the
// subscriber implements TopicRemover (bounded by 10 s). It is idempotent
// and returns the first error of the first call.
func (r *Requester) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		close(r.closing)
		if r.direct != nil {
			r.closeErr = r.direct.Close()
			return
		}
		r.cancelSub()
		<-r.loopDone
		r.closeErr = r.remove()
	})
	return r.closeErr
}

// remove deletes the reply topic where the subscriber can.
func (r *Requester) remove() error {
	tr, ok := r.sub.(TopicRemover)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.RemoveTopic(ctx, r.replyTo); err != nil && !errors.Is(err, relay.ErrNotSupported) {
		return fmt.Errorf("relay/reqreply: removing reply topic %q: %w", r.replyTo, err)
	}
	return nil
}
