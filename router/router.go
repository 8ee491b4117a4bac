package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-relay/relay"
)

const (
	stateIdle = iota
	stateRunning
	stateDone
)

// Router runs handlers: it subscribes each to its topic, calls it (through
// the middleware) for every delivered message with bounded concurrency and
// per-Key order, publishes what it returns, and settles the message.
//
// A Router is configured (Use, AddHandler, AddBatchHandler, Own) before
// Run and runs once. Its methods are safe for concurrent use.
type Router struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	state    int
	mw       []Middleware
	bmw      []BatchMiddleware
	handlers []*handler
	names    map[string]bool
	owned    []io.Closer

	running   chan struct{} // closed once every handler is subscribed
	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	done      chan struct{} // closed when the router has stopped
	err       error         // result of the shutdown; read after done

	// Runtime, set by Run.
	stopping   chan struct{} // closed when the drain begins
	hardCtx    context.Context
	hardCancel context.CancelFunc
	failed     chan error
}

// New returns a Router configured by cfg.
func New(cfg Config) (*Router, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Router{
		cfg:      cfg,
		log:      cfg.Logger,
		names:    map[string]bool{},
		running:  make(chan struct{}),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		stopping: make(chan struct{}),
	}, nil
}

// Use adds router-level middleware, applied to every handler (also those
// added earlier), outside any handler-level middleware. The first given is
// the outermost: Use(a, b) runs a, then b, then the handler. It returns
// ErrRunning after Run started.
func (r *Router) Use(mw ...Middleware) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != stateIdle {
		return ErrRunning
	}
	for _, h := range r.handlers {
		if h.guarantee() == relay.AtMostOnce {
			if err := refuseRetrying(h.name, mw, "router middleware"); err != nil {
				return err
			}
		}
	}
	r.mw = append(r.mw, mw...)
	return nil
}

// AddHandler binds h to the messages of topic that sub delivers. name must
// be unique within the router; metrics, logs, poison metadata and dedup
// keys use it. The router does not close sub unless it is handed to Own.
// It returns ErrRunning after Run started and an error for an invalid
// argument or option, among them a *GuaranteeError for relay.ExactlyOnce
// and retrying middleware on an at-most-once handler (see WithGuarantee).
func (r *Router) AddHandler(name string, sub relay.Subscriber, topic string, h Handler, opts ...HandlerOption) error {
	hc := handlerConfig{concurrency: 1, queue: DefaultQueueSize}
	for _, o := range opts {
		o(&hc)
	}
	errs := checkBinding(name, sub, topic, h == nil)
	if hc.concurrency < 1 || hc.concurrency > maxConcurrency {
		errs = append(errs, fmt.Errorf("router: handler %q: concurrency %d not in [1, %d]", name, hc.concurrency, maxConcurrency))
	}
	if hc.queue < 0 {
		errs = append(errs, fmt.Errorf("router: handler %q: queue size %d is negative", name, hc.queue))
	}
	for i, o := range hc.outputs {
		if o.Publisher == nil {
			errs = append(errs, fmt.Errorf("router: handler %q: output %d: publisher is nil", name, i))
		}
		if o.Topic == "" {
			errs = append(errs, fmt.Errorf("router: handler %q: output %d: %w: empty", name, i, relay.ErrInvalidTopic))
		}
	}
	if err := checkGuarantee(name, hc.guarantee, sub, hc.outputs, false); err != nil {
		errs = append(errs, err)
	}
	if hc.guarantee == relay.AtMostOnce {
		r.mu.Lock()
		routerMW := r.mw
		r.mu.Unlock()
		for _, err := range []error{refuseRetrying(name, hc.middleware, "middleware"), refuseRetrying(name, routerMW, "router middleware")} {
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return r.add(&handler{r: r, name: name, sub: sub, topic: topic, fn: h, cfg: hc}, errs)
}

// checkBinding reports the problems of the arguments that every kind of
// handler takes; noFunc tells that the handler func is nil.
func checkBinding(name string, sub relay.Subscriber, topic string, noFunc bool) []error {
	var errs []error
	if name == "" {
		errs = append(errs, errors.New("router: handler name is empty"))
	}
	if sub == nil {
		errs = append(errs, fmt.Errorf("router: handler %q: subscriber is nil", name))
	}
	if topic == "" {
		errs = append(errs, fmt.Errorf("router: handler %q: %w: empty", name, relay.ErrInvalidTopic))
	}
	if noFunc {
		errs = append(errs, fmt.Errorf("router: handler %q: handler func is nil", name))
	}
	return errs
}

// add registers h, or returns ErrRunning after Run started, or errs joined
// with a duplicate name.
func (r *Router) add(h *handler, errs []error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != stateIdle {
		return ErrRunning
	}
	if h.name != "" && r.names[h.name] {
		errs = append(errs, fmt.Errorf("router: handler %q added twice", h.name))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.names[h.name] = true
	r.handlers = append(r.handlers, h)
	return nil
}

// Own hands publishers, subscribers or any io.Closer to the router: it
// closes each exactly once when it stops (after every handler finished and
// every subscription ended), in reverse order of Own calls, like defer.
// Values not handed to Own are never closed by the router, so one publisher
// can be shared by many handlers and routers. Owning the same value twice
// closes it once; a value whose dynamic type cannot be compared with ==
// (a func type, a slice type such as a list of closers) cannot be
// recognised again, so it is closed once per Own call that handed it.
// After the router stopped, Own closes c at once.
func (r *Router) Own(c ...io.Closer) {
	r.mu.Lock()
	if r.state == stateDone {
		r.mu.Unlock()
		if err := closeAll(c); err != nil {
			r.log.Warn("router: closing owned value", "err", err)
		}
		return
	}
	defer r.mu.Unlock()
	for _, x := range c {
		if x != nil {
			r.owned = append(r.owned, x)
		}
	}
}

// closeAll closes cs in reverse order, each distinct value once. Values
// are told apart with ==, which panics for dynamic types that are not
// comparable (func types, slices, maps, or structs holding them): such a
// value is only ever equal to nothing, so each occurrence is closed, and
// the same non-comparable value handed twice is closed twice.
func closeAll(cs []io.Closer) error {
	var errs []error
	closed := make([]io.Closer, 0, len(cs))
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		if isComparable(c) && slices.Contains(closed, c) {
			continue
		}
		if isComparable(c) {
			closed = append(closed, c)
		}
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("router: closing %T: %w", c, err))
		}
	}
	return errors.Join(errs...)
}

// isComparable reports whether == on c cannot panic.
func isComparable(c io.Closer) bool {
	return reflect.TypeOf(c).Comparable() && !holdsIncomparable(reflect.ValueOf(c))
}

// holdsIncomparable reports whether v, of a comparable type, holds an
// interface value whose dynamic type is not comparable (then == panics).
func holdsIncomparable(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return false
		}
		e := v.Elem()
		return !e.Type().Comparable() || holdsIncomparable(e)
	case reflect.Struct:
		for i := range v.NumField() {
			if holdsIncomparable(v.Field(i)) {
				return true
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			if holdsIncomparable(v.Index(i)) {
				return true
			}
		}
	}
	return false
}

// Running returns a channel that is closed once Run has subscribed every
// handler. It never closes if Run fails to start.
func (r *Router) Running() <-chan struct{} { return r.running }

// Done returns a channel that is closed once the router has stopped.
func (r *Router) Done() <-chan struct{} { return r.done }

// Run subscribes every handler and handles messages until ctx is done or
// Close is called; both shut the router down gracefully:
//
//  1. stop fetching: no handler starts on a new message or batch; messages
//     that were delivered but not started, including those collected into
//     a batch not yet handed to its BatchHandler, are nacked (redelivered
//     at once);
//  2. handlers in progress (a message or a batch) finish with a live
//     context, for up to CloseTimeout (then their context is cancelled),
//     and their messages are settled (outputs published, then Ack; or
//     Nack) while the subscriptions still run, so the settlements count;
//  3. the subscriptions end (their contexts are cancelled; Run waits for
//     their channels to close);
//  4. values handed to Own are closed.
//
// A subscription's channel closes only after every settlement made before
// it ended was sent to the broker (or failed after retries and was logged)
// and every unsettled message was released to the group (see
// relay.Subscriber.Subscribe), so once Run returned, the broker has all of
// the drain's settlements, whether or not the subscriber was handed to Own.
//
// Run blocks until all of this is done. It returns nil after a graceful
// shutdown, ErrCloseTimeout if handlers outlived CloseTimeout,
// ErrSubscriptionEnded if a subscription ended on its own (the router then
// shuts down), the error of a failed Subscribe, ErrRunning if called twice
// and ErrClosed after Close. A router runs once.
//
// The values of ctx (not its cancellation) reach the handlers' contexts.
func (r *Router) Run(ctx context.Context) error {
	r.mu.Lock()
	switch r.state {
	case stateRunning:
		r.mu.Unlock()
		return ErrRunning
	case stateDone:
		r.mu.Unlock()
		return ErrClosed
	}
	r.state = stateRunning
	handlers := r.handlers
	mw := Chain(r.mw...)
	bmw := ChainBatch(r.bmw...)
	r.mu.Unlock()

	r.hardCtx, r.hardCancel = context.WithCancel(context.WithoutCancel(ctx))
	r.failed = make(chan error, len(handlers))

	var cause error
	started := make([]*handler, 0, len(handlers))
	for _, h := range handlers {
		if err := h.start(mw, bmw); err != nil {
			cause = fmt.Errorf("router: handler %q: subscribe %q: %w", h.name, h.topic, err)
			break
		}
		started = append(started, h)
	}
	if cause == nil {
		close(r.running)
		r.log.Debug("router: running", "handlers", len(started))
		select {
		case <-ctx.Done():
		case <-r.closing:
		case cause = <-r.failed:
			r.log.Error("router: shutting down", "err", cause)
		}
	}
	err := r.shutdown(started, cause)

	r.mu.Lock()
	r.state = stateDone
	owned := r.owned
	r.owned = nil
	r.mu.Unlock()
	if cerr := closeAll(owned); cerr != nil {
		err = errors.Join(err, cerr)
	}
	r.err = err
	close(r.done)
	return err
}

// shutdown drains the started handlers; see Run.
func (r *Router) shutdown(started []*handler, cause error) error {
	close(r.stopping)
	errs := []error{cause}

	allDone := make(chan struct{})
	go func() {
		for _, h := range started {
			h.wg.Wait()
		}
		close(allDone)
	}()
	timer := time.NewTimer(r.cfg.CloseTimeout)
	select {
	case <-allDone:
		timer.Stop()
	case <-timer.C:
		r.log.Warn("router: close timeout: cancelling the contexts of handlers in progress", "timeout", r.cfg.CloseTimeout)
		r.hardCancel()
		grace := time.NewTimer(hardStopGrace)
		var stuck []string
		select {
		case <-allDone:
		case <-grace.C:
			for _, h := range started {
				if h.inProgress.Load() > 0 {
					stuck = append(stuck, h.name)
				}
			}
		}
		grace.Stop()
		if len(stuck) > 0 {
			errs = append(errs, fmt.Errorf("%w (ignoring their context: %s)", ErrCloseTimeout, strings.Join(stuck, ", ")))
		} else {
			errs = append(errs, ErrCloseTimeout)
		}
	}
	r.hardCancel()

	for _, h := range started {
		h.subCancel()
	}
	for _, h := range started {
		h.awaitSubscriptionEnd()
	}
	return errors.Join(errs...)
}

// Close shuts the router down as described at Run and waits until it has
// stopped; it returns Run's result. Called before Run, it closes the values
// handed to Own and makes Run return ErrClosed. Close is idempotent and
// safe from any goroutine. Called from inside a handler it returns only
// after CloseTimeout (the handler itself is still in progress); cancel Run's
// ctx there instead.
func (r *Router) Close() error {
	r.mu.Lock()
	r.closeOnce.Do(func() { close(r.closing) })
	if r.state == stateIdle {
		r.state = stateDone
		owned := r.owned
		r.owned = nil
		r.mu.Unlock()
		r.err = closeAll(owned)
		close(r.done)
		return r.err
	}
	r.mu.Unlock()
	<-r.done
	return r.err
}
