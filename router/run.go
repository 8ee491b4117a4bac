package router

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// handler is one AddHandler or AddBatchHandler binding and, once started,
// its runtime.
type handler struct {
	r     *Router
	name  string
	sub   relay.Subscriber
	topic string
	fn    Handler
	cfg   handlerConfig
	bfn   BatchHandler // set instead of fn by AddBatchHandler
	bcfg  batchConfig

	chain      Handler
	ctx        context.Context // router-owned: live until the drain times out
	subCancel  context.CancelFunc
	ch         <-chan *relay.Message
	batches    <-chan []*relay.Message // a batch handler's, with the batch path
	lanes      []chan *relay.Message
	shared     chan *relay.Message // messages without a Key, for any lane
	wg         sync.WaitGroup      // dispatcher and lanes
	inProgress atomic.Int64
}

// start subscribes and starts the dispatcher and lanes, or the batch loop
// of a batch handler (which only batch middleware wraps).
func (h *handler) start(routerMW Middleware, routerBMW BatchMiddleware) error {
	r := h.r
	if h.bfn != nil {
		h.bfn = routerBMW(ChainBatch(h.bcfg.middleware...)(h.bfn))
	} else {
		fn := h.fn
		if h.cfg.guarantee == relay.AtMostOnce {
			fn = onceOnly(h.name, fn)
		}
		h.chain = routerMW(Chain(h.cfg.middleware...)(fn))
	}
	info := &handlerInfo{name: h.name, topic: h.topic, stopping: r.stopping}
	if gn, ok := h.sub.(relay.GroupNamer); ok {
		info.group = gn.Group()
	}
	h.ctx = context.WithValue(r.hardCtx, infoKey{}, info)

	// The subscription outlives Run's ctx: it is cancelled only after the
	// drain, so that the settlements of the drained messages count.
	subCtx, cancel := context.WithCancel(context.WithoutCancel(r.hardCtx))
	if bs, ok := h.sub.(driver.BatchSubscriber); ok && h.bfn != nil {
		// A batch handler takes the shared layer's batches as they come.
		batches, err := bs.SubscribeBatches(subCtx, h.topic)
		if err != nil {
			cancel()
			return err
		}
		h.subCancel, h.batches = cancel, batches
	} else {
		ch, err := h.sub.Subscribe(subCtx, h.topic)
		if err != nil {
			cancel()
			return err
		}
		h.subCancel, h.ch = cancel, ch
	}

	if h.bfn != nil {
		h.wg.Add(1)
		if h.bcfg.concurrency > 1 {
			go h.runBatchLanes()
		} else {
			go h.runBatches()
		}
		return nil
	}
	n := h.cfg.concurrency
	if n == 1 {
		h.wg.Add(1)
		go h.runInline()
		return nil
	}
	h.lanes = make([]chan *relay.Message, n)
	for i := range h.lanes {
		h.lanes[i] = make(chan *relay.Message, h.cfg.queue)
	}
	h.shared = make(chan *relay.Message, n)
	var lanes sync.WaitGroup
	lanes.Add(n)
	for i := range h.lanes {
		go h.runLane(h.lanes[i], &lanes)
	}
	h.wg.Add(1)
	go h.dispatch(&lanes)
	return nil
}

// guarantee returns the handler's delivery guarantee.
func (h *handler) guarantee() relay.Guarantee {
	if h.bfn != nil {
		return h.bcfg.guarantee
	}
	return h.cfg.guarantee
}

func (h *handler) stopped() bool {
	select {
	case <-h.r.stopping:
		return true
	default:
		return false
	}
}

// subscriptionEnded reports a channel that closed while the router runs.
func (h *handler) subscriptionEnded() {
	if h.stopped() {
		return
	}
	select {
	case h.r.failed <- fmt.Errorf("%w: handler %q, topic %q", ErrSubscriptionEnded, h.name, h.topic):
	default:
	}
}

// runInline handles messages on the receiving goroutine (concurrency 1).
func (h *handler) runInline() {
	defer h.wg.Done()
	for {
		m, ok := h.next()
		if !ok {
			return
		}
		if h.stopped() {
			h.unstarted(m)
			return
		}
		h.process(m)
	}
}

// next waits for the subscription's next message. ok is false when the
// router stops first or the subscription ended (which it reports).
func (h *handler) next() (m *relay.Message, ok bool) {
	select {
	case <-h.r.stopping:
		return nil, false
	case m, ok = <-h.ch:
		if !ok {
			h.subscriptionEnded()
		}
		return m, ok
	}
}

// dispatch reads the subscription and hands each message to its lane.
func (h *handler) dispatch(lanes *sync.WaitGroup) {
	defer h.wg.Done()
	defer func() {
		// Lanes stop after their current message; what waits in the
		// queues was not started and goes back to the group.
		lanes.Wait()
		for _, q := range append(h.lanes, h.shared) {
			close(q)
			for m := range q {
				h.unstarted(m)
			}
		}
	}()
	n := uint32(len(h.lanes))
	for {
		m, ok := h.next()
		if !ok {
			return
		}
		q := h.shared
		if m.Key != "" {
			q = h.lanes[fnv32a(m.Key)%n]
		}
		select {
		case q <- m:
		case <-h.r.stopping:
			h.unstarted(m)
			return
		}
	}
}

func (h *handler) runLane(own <-chan *relay.Message, lanes *sync.WaitGroup) {
	defer lanes.Done()
	for {
		var m *relay.Message
		select {
		case <-h.r.stopping:
			return
		case m = <-own:
		case m = <-h.shared:
		}
		if h.stopped() {
			h.unstarted(m)
			return
		}
		h.process(m)
	}
}

// unstarted returns a message the router will not handle to its group.
func (h *handler) unstarted(m *relay.Message) {
	if err := m.Nack(); err != nil && !errors.Is(err, relay.ErrSubscriptionEnded) {
		h.r.log.Debug("router: nack of an unstarted message failed", "handler", h.name, "id", m.ID, "err", err)
	}
}

// process runs the chain for m, publishes its outputs and settles m.
func (h *handler) process(m *relay.Message) {
	h.inProgress.Add(1)
	defer h.inProgress.Add(-1)

	if h.cfg.guarantee == relay.AtMostOnce {
		h.processAtMostOnce(m)
		return
	}
	outs, err := h.call(h.ctx, m)
	if err == nil && len(outs) > 0 {
		err = h.publish(outs)
	}
	h.settle(m, err)
}

// processAtMostOnce acks m, then runs the chain once and publishes its
// outputs once; a failure is logged and m is lost (see WithGuarantee).
func (h *handler) processAtMostOnce(m *relay.Message) {
	if !h.ackFirst(m) {
		return
	}
	ctx := context.WithValue(h.ctx, callsKey{}, new(atomic.Int32))
	outs, err := h.call(ctx, m)
	if err == nil && len(outs) > 0 {
		err = h.publish(outs)
	}
	if err != nil {
		h.r.log.Warn("router: at-most-once handler failed; the message was acked and is lost",
			"handler", h.name, "topic", h.topic, "id", m.ID, "err", err)
	}
}

// ackFirst acks m before an at-most-once handler runs. It reports false,
// and m is not to be handled, when the ack fails (the subscription ended:
// m goes back to the group, and handling it could take effect twice).
func (h *handler) ackFirst(m *relay.Message) bool {
	if err := m.Ack(); err != nil {
		h.r.log.Warn("router: ack before an at-most-once handler failed; the message is not handled",
			"handler", h.name, "id", m.ID, "err", err)
		return false
	}
	return true
}

// settle acks m after a success (err nil) and otherwise nacks it with
// Config.RedeliveryDelay, logging the failure. A message that is already
// settled (the handler did it) is left alone.
func (h *handler) settle(m *relay.Message, err error) {
	if m.Settled() {
		return
	}
	if err != nil {
		delay := h.r.cfg.RedeliveryDelay(m, err)
		h.r.log.Warn("router: handler failed; message will be redelivered",
			"handler", h.name, "topic", h.topic, "id", m.ID, "attempt", m.Attempt(), "delay", delay, "err", err)
		if serr := m.NackAfter(delay); serr != nil {
			h.r.log.Debug("router: nack failed", "handler", h.name, "id", m.ID, "err", serr)
		}
		return
	}
	if serr := m.Ack(); serr != nil {
		h.r.log.Warn("router: ack failed; the message will be redelivered", "handler", h.name, "id", m.ID, "err", serr)
	}
}

// call runs the chain, turning a panic into a *PanicError.
func (h *handler) call(ctx context.Context, m *relay.Message) (outs []*relay.Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			outs, err = nil, &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.chain(ctx, m)
}

// publish sends outs to every output that takes them, in the order of the
// outputs, after checking that every message goes somewhere.
func (h *handler) publish(outs []*relay.Message) error {
	for i, m := range outs {
		if m == nil {
			return fmt.Errorf("router: handler %q returned %d message(s): %w", h.name, len(outs), relay.NilMessageError(i))
		}
	}
	if len(h.cfg.outputs) == 0 {
		return fmt.Errorf("%w (handler %q returned %d)", ErrNoOutput, h.name, len(outs))
	}
	sels := make([][]*relay.Message, len(h.cfg.outputs))
	var taken []bool
	catchAll := false
	for i, o := range h.cfg.outputs {
		if o.Match == nil {
			sels[i], catchAll = outs, true
			continue
		}
		if taken == nil {
			taken = make([]bool, len(outs))
		}
		for j, m := range outs {
			if o.Match(m) {
				sels[i] = append(sels[i], m)
				taken[j] = true
			}
		}
	}
	if !catchAll {
		for j, t := range taken {
			if !t {
				return fmt.Errorf("%w: handler %q: message %s matched no output", ErrNoOutput, h.name, outs[j].ID)
			}
		}
	}
	for i, o := range h.cfg.outputs {
		if len(sels[i]) == 0 {
			continue
		}
		if err := o.Publisher.Publish(h.ctx, o.Topic, sels[i]...); err != nil {
			return fmt.Errorf("router: handler %q: publish to %q: %w", h.name, o.Topic, err)
		}
	}
	return nil
}

// awaitSubscriptionEnd waits (bounded) for the subscription channel to
// close after subCancel, nacking anything still delivered meanwhile.
func (h *handler) awaitSubscriptionEnd() {
	t := time.NewTimer(subscriptionEndWait)
	defer t.Stop()
	for {
		select {
		case m, ok := <-h.ch: // nil for a batch handler on the batch path
			if !ok {
				return
			}
			h.unstarted(m)
		case msgs, ok := <-h.batches: // nil otherwise
			if !ok {
				return
			}
			for _, m := range msgs {
				h.unstarted(m)
			}
		case <-t.C:
			h.r.log.Warn("router: subscription did not end in time", "handler", h.name, "topic", h.topic)
			return
		}
	}
}

// fnv32a hashes a Key to a lane.
func fnv32a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
