package router

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/go-relay/relay"
)

// Defaults of the batch options. DefaultBatchSize equals the smallest
// default in-flight window of this module's adapters (64), so that a
// batch fills with every adapter's defaults.
const (
	DefaultBatchSize = 64
	DefaultBatchWait = 50 * time.Millisecond
	// batchPrealloc caps the capacity a batch is allocated with, so that a
	// huge WithBatchSize that the in-flight window never fills costs
	// nothing up front.
	batchPrealloc = 1024
)

// BatchHandler processes several messages together (one bulk insert, one
// API call) and reports which of them failed.
//
// msgs holds at least one message, in delivery order; the slice is the
// handler's to keep. The router settles the messages by the result:
//
//   - nil: every message is acked;
//   - an error that is (errors.As) a *BatchError: the messages whose IDs it
//     names are nacked with Config.RedeliveryDelay, each with its own
//     error; the others are acked;
//   - any other error, or a panic (recovered as *PanicError): every message
//     is nacked with Config.RedeliveryDelay.
//
// A message the handler settled itself (Ack, Nack) is left as it is.
// relay.Permanent errors are nacked like any other: there is no poison
// queue for batches, so a handler that meets a poison message publishes it
// where it belongs itself and counts it as a success.
//
// ctx follows the rules of Handler: it is owned by the router, stays live
// while the router drains on shutdown, is cancelled only when CloseTimeout
// passes and carries HandlerName, Topic and Stopping.
type BatchHandler func(ctx context.Context, msgs []*relay.Message) error

// BatchError is returned by a BatchHandler that handled some messages of a
// batch and not others. Failed maps the IDs of the failed messages to their
// errors; every message of the batch not named is acked. IDs that are not
// in the batch are ignored; a named ID whose error is nil fails with the
// BatchError itself. Messages of one batch that share an ID share the
// outcome. A BatchError with no entries acks the whole batch.
type BatchError struct {
	Failed map[string]error
}

// Error names up to three failed messages, in ID order.
func (e *BatchError) Error() string {
	ids := make([]string, 0, len(e.Failed))
	for id := range e.Failed {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var b strings.Builder
	fmt.Fprintf(&b, "router: batch: %d failed", len(ids))
	for i, id := range ids {
		if i == 3 {
			b.WriteString("; …")
			break
		}
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		fmt.Fprintf(&b, "%s%s: %v", sep, id, e.Failed[id])
	}
	return b.String()
}

// failure returns the error of message id: nil unless Failed names it.
func (e *BatchError) failure(id string) error {
	if e == nil {
		return nil
	}
	err, named := e.Failed[id]
	if named && err == nil {
		return e
	}
	return err
}

// BatchOption configures one batch handler in AddBatchHandler.
type BatchOption func(*batchConfig)

type batchConfig struct {
	size        int
	concurrency int
	wait        time.Duration
	guarantee   relay.Guarantee
	middleware  []BatchMiddleware
}

// BatchMiddleware wraps a BatchHandler, as Middleware wraps a Handler: for
// instrumentation (spans, metrics) and anything else that sees a batch as
// a whole. The wrapped handler's result settles the batch (see
// BatchHandler), so a BatchMiddleware that changes the error changes the
// settlement.
type BatchMiddleware func(BatchHandler) BatchHandler

// ChainBatch composes batch middleware so that the first is the
// outermost: ChainBatch(a, b)(h) == a(b(h)).
func ChainBatch(mw ...BatchMiddleware) BatchMiddleware {
	return func(h BatchHandler) BatchHandler {
		for i := len(mw) - 1; i >= 0; i-- {
			if mw[i] != nil {
				h = mw[i](h)
			}
		}
		return h
	}
}

// WithBatchMiddleware adds middleware to one batch handler. It runs inside
// the router-level batch middleware given to UseBatch, whatever the order
// of the calls; among themselves the first is the outermost.
func WithBatchMiddleware(mw ...BatchMiddleware) BatchOption {
	return func(c *batchConfig) { c.middleware = append(c.middleware, mw...) }
}

// UseBatch adds router-level batch middleware, applied to every batch
// handler (also those added earlier), outside any WithBatchMiddleware.
// The first given is the outermost. Per-message middleware (Use) does not
// apply to batch handlers; this is their counterpart. It returns
// ErrRunning after Run started.
func (r *Router) UseBatch(mw ...BatchMiddleware) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != stateIdle {
		return ErrRunning
	}
	r.bmw = append(r.bmw, mw...)
	return nil
}

// WithBatchGuarantee chooses the batch handler's delivery guarantee, as
// WithGuarantee does for a Handler: with relay.AtMostOnce every message of
// a batch is acked before the handler is called, and a failed batch (or a
// panic) is logged and lost, never redelivered; relay.ExactlyOnce is
// refused by AddBatchHandler with a *GuaranteeError (exactly-once covers
// the outputs the router publishes, which batch handlers have not; see
// WithGuarantee).
func WithBatchGuarantee(g relay.Guarantee) BatchOption {
	return func(c *batchConfig) { c.guarantee = g }
}

// WithBatchSize sets the most messages a batch holds (default 64). A batch
// never holds more than the subscription's in-flight window (the adapter's
// inflight= parameter), because the subscription delivers no more until
// some are settled: with a size above the window a batch never fills and
// the wait closes it. Set inflight to at least the batch size; twice the
// size lets the next batch be delivered while one is handled.
func WithBatchSize(n int) BatchOption {
	return func(c *batchConfig) { c.size = n }
}

// WithBatchConcurrency sets how many batches are handled at once (default
// 1). Messages with the same Key always go to the same one of n lanes, so
// they are handled in delivery order, one batch after another; messages
// without a Key go to whichever lane is free. A lane joins what waits for
// it into batches of at most WithBatchSize, so with several lanes a batch
// can be smaller than the messages delivered at once. The in-flight window
// bounds what all lanes hold together: set inflight to at least n times
// the batch size.
func WithBatchConcurrency(n int) BatchOption {
	return func(c *batchConfig) { c.concurrency = n }
}

// WithBatchWait sets how long a batch waits for more messages after its
// first one before it is handed to the handler without being full (default
// 50ms). With 0 a batch takes only the messages already delivered.
func WithBatchWait(d time.Duration) BatchOption {
	return func(c *batchConfig) { c.wait = d }
}

// AddBatchHandler binds h to the messages of topic that sub delivers,
// handed over in batches: the router takes messages into a batch until it
// holds WithBatchSize messages or WithBatchWait has passed since its first
// one, calls h once with them and settles them by the result (see
// BatchHandler). One batch is handled at a time, so delivery order is kept,
// unless WithBatchConcurrency says more (then per Key).
//
// name must be unique within the router, across AddHandler and
// AddBatchHandler. Middleware (Use, WithMiddleware) is per message and does
// not apply to batch handlers; batch middleware (UseBatch,
// WithBatchMiddleware) does. On shutdown a batch in the handler finishes
// like a message in a Handler (see Run); messages collected into a batch
// that was not handed to the handler yet are nacked unhandled, so they go
// back to the group at once. The router does not close sub unless it is
// handed to Own. It returns ErrRunning after Run started and an error for
// an invalid argument or option.
func (r *Router) AddBatchHandler(name string, sub relay.Subscriber, topic string, h BatchHandler, opts ...BatchOption) error {
	bc := batchConfig{size: DefaultBatchSize, wait: DefaultBatchWait, concurrency: 1}
	for _, o := range opts {
		o(&bc)
	}
	errs := checkBinding(name, sub, topic, h == nil)
	if bc.size < 1 {
		errs = append(errs, fmt.Errorf("router: handler %q: batch size %d is less than 1", name, bc.size))
	}
	if bc.concurrency < 1 {
		errs = append(errs, fmt.Errorf("router: handler %q: batch concurrency %d is less than 1", name, bc.concurrency))
	}
	if bc.wait < 0 {
		errs = append(errs, fmt.Errorf("router: handler %q: batch wait %v is negative", name, bc.wait))
	}
	if err := checkGuarantee(name, bc.guarantee, sub, nil, true); err != nil {
		errs = append(errs, err)
	}
	return r.add(&handler{r: r, name: name, sub: sub, topic: topic, bfn: h, bcfg: bc}, errs)
}

// runBatches collects batches from the subscription and handles them one
// at a time, on one goroutine.
func (h *handler) runBatches() {
	defer h.wg.Done()
	rd := newBatchReader(h)
	defer rd.stop()
	for {
		batch, ok := rd.take(h.bcfg.size)
		if !ok || h.stopped() {
			for _, m := range batch {
				h.unstarted(m)
			}
			rd.unstartedRest()
			return
		}
		h.processBatch(batch)
	}
}

// processBatch runs the batch handler and settles every message of msgs.
func (h *handler) processBatch(msgs []*relay.Message) {
	h.inProgress.Add(1)
	defer h.inProgress.Add(-1)

	if h.bcfg.guarantee == relay.AtMostOnce {
		h.processBatchAtMostOnce(msgs)
		return
	}
	err := h.callBatch(msgs)
	var pe *PanicError
	var be *BatchError
	if !errors.As(err, &pe) && errors.As(err, &be) {
		for _, m := range msgs {
			h.settle(m, be.failure(m.ID))
		}
		return
	}
	for _, m := range msgs {
		h.settle(m, err)
	}
}

// callBatch runs the batch handler, turning a panic into a *PanicError.
func (h *handler) callBatch(msgs []*relay.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.bfn(h.ctx, msgs)
}

// processBatchAtMostOnce acks every message of msgs, then runs the batch
// handler once; its failure loses the messages (see WithBatchGuarantee).
// Messages whose ack fails (their subscription ended) are not handled:
// they go back to the group, and handling them could take effect twice.
func (h *handler) processBatchAtMostOnce(msgs []*relay.Message) {
	acked := msgs[:0:0]
	for _, m := range msgs {
		if h.ackFirst(m) {
			acked = append(acked, m)
		}
	}
	if len(acked) == 0 {
		return
	}
	if err := h.callBatch(acked); err != nil {
		h.r.log.Warn("router: at-most-once batch handler failed; its messages were acked and are lost",
			"handler", h.name, "topic", h.topic, "messages", len(acked), "first_id", acked[0].ID, "err", err)
	}
}
