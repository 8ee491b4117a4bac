package bridge

import (
	"context"
	"errors"

	"github.com/go-relay/relay"
)

// OpenTelemetry on the pipelined path: each message of a batch is traced
// and metered on its own, as the per-message chain does it. Its "process
// FROM_TOPIC" span (a child of the context the message carries, linked to
// it) and its process metrics start when the batch does and end with the
// message's outcome; its "send TO_TOPIC" span is a child of that span,
// linked to the source message's context, and its context is what the
// forwarded copy carries; the batch's one Publish call is one send
// operation in the destination metrics. A message forwarded alone after
// its batch (a failed copy, a dedup key held elsewhere, a duplicate) runs
// the per-message chain without the telemetry middleware under its own
// process span, so retries, poisoning and dedup are recorded on it, once.

// batchSpans holds the process span and metrics of each message of one
// batch; nil when the route records no telemetry.
type batchSpans struct {
	ctxs map[*relay.Message]context.Context
	ends map[*relay.Message]func(error)
}

// startBatch starts the process span and metrics of every message of msgs.
func (t telemetry) startBatch(ctx context.Context, msgs []*relay.Message) *batchSpans {
	if t.srcTracer == nil && t.srcMetrics == nil {
		return nil
	}
	b := &batchSpans{ctxs: make(map[*relay.Message]context.Context, len(msgs)), ends: make(map[*relay.Message]func(error), len(msgs))}
	for _, m := range msgs {
		mctx := ctx
		var endSpan, endMetrics func(error)
		if t.srcTracer != nil {
			mctx, endSpan = t.srcTracer.StartProcess(ctx, m)
		}
		if t.srcMetrics != nil {
			endMetrics = t.srcMetrics.StartProcess(ctx, m)
		}
		b.ctxs[m] = mctx
		b.ends[m] = func(err error) {
			if endMetrics != nil {
				endMetrics(err)
			}
			if endSpan != nil {
				endSpan(err)
			}
		}
	}
	return b
}

// ctx returns the context to forward m in: under its process span.
func (b *batchSpans) ctx(ctx context.Context, m *relay.Message) context.Context {
	if b == nil {
		return ctx
	}
	if c, ok := b.ctxs[m]; ok {
		return c
	}
	return ctx
}

// end records m's outcome; only the first call for m counts.
func (b *batchSpans) end(m *relay.Message, err error) {
	if b == nil {
		return
	}
	if end, ok := b.ends[m]; ok {
		delete(b.ends, m)
		end(err)
	}
}

// endRest records every message not ended yet as handled.
func (b *batchSpans) endRest() {
	if b == nil {
		return
	}
	for m, end := range b.ends {
		delete(b.ends, m)
		end(nil)
	}
}

// startSends starts the send span of each copy (copies[i] of srcs[i])
// under its message's process span and returns what ends them with the
// publish's answer.
func (f *forwarder) startSends(ctx context.Context, b *batchSpans, srcs, copies []*relay.Message) func(error) {
	if b == nil || f.r.tel.dstTracer == nil {
		return func(error) {}
	}
	ends := make([]func(error), len(srcs))
	for i, m := range srcs {
		_, ends[i] = f.r.tel.startForward(b.ctx(ctx, m), f.r.cfg.To.Topic, m, copies[i])
	}
	return func(err error) {
		errs := copyErrs(srcs, err)
		for i, end := range ends {
			end(errs[i])
		}
	}
}

// copyErrs returns the error of each copy of srcs that err reports.
func copyErrs(srcs []*relay.Message, err error) []error {
	out := make([]error, len(srcs))
	if err == nil {
		return out
	}
	var pe *relay.PublishError
	if !errors.As(err, &pe) {
		for i := range out {
			out[i] = err
		}
		return out
	}
	byID := make(map[string]error, len(pe.Failed))
	for _, fl := range pe.Failed {
		byID[fl.ID] = fl.Err
	}
	for i, m := range srcs {
		out[i] = byID[m.ID]
	}
	return out
}
