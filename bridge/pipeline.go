package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// The pipelined path of a route (Route.pipelined): the router hands the
// forwarder batches straight from the source's batch path, in lanes that
// keep each Key's order (router.WithBatchConcurrency), and each lane
// publishes its batch to the destination in one call and acks the batch's
// source messages once the destination confirmed their copies. With
// several lanes, several publish calls are in flight at once, so the
// route's rate is bound by the window, not by one round trip per message.
//
// A message whose copy failed is forwarded alone through the route's
// per-message chain (observe → PoisonQueue → Retry → forward), as if it
// had not been batched: it is retried or poisoned on its own while the
// rest of its batch is acked. Only what the chain still fails on is
// nacked (a *router.BatchError names it). On a route with Dedup, each
// message of a batch is deduplicated as the per-message chain would (see
// dedupbatch.go).

// pipelined reports whether the route forwards in batches: at-least-once
// and at-most-once routes with a batch size above 1, with or without
// Dedup (see dedupbatch.go) and OpenTelemetry (pipeline_tel.go). The
// others forward one message per handler call through the batcher.
func (r *route) pipelined() bool {
	return r.cfg.Guarantee != relay.ExactlyOnce && r.cfg.Batch > 1
}

// lanes is how many batches a pipelined route publishes at once: enough
// for Concurrency messages in batches of Batch, at least 1.
func (r *route) lanes() int {
	return max(1, (r.cfg.Concurrency+r.cfg.Batch-1)/r.cfg.Batch)
}

// addPipelined binds the pipelined forwarder to the source. mws is the
// route's chain (chain.go); the forwarder records the telemetry of a batch's
// messages itself, so the per-message chain it forwards failed copies
// through runs without the telemetry middleware, under their spans.
func (r *route) addPipelined(rt *router.Router, sub relay.Subscriber, f *forwarder, mws []router.Middleware) error {
	f.single = router.Chain(mws[len(r.tel.middleware()):]...)(f.handle)
	return rt.AddBatchHandler(r.cfg.Name, sub, r.cfg.From.Topic, f.handleBatch,
		router.WithBatchSize(r.cfg.Batch),
		router.WithBatchWait(0),
		router.WithBatchConcurrency(r.lanes()),
		router.WithBatchGuarantee(r.routerGuarantee()))
}

// handleBatch forwards one batch: the router acks every message it does
// not name in the returned *router.BatchError.
func (f *forwarder) handleBatch(ctx context.Context, msgs []*relay.Message) error {
	r := f.r
	spans := r.tel.startBatch(ctx, msgs)
	defer spans.endRest()
	srcs := make([]*relay.Message, 0, len(msgs))
	for _, m := range msgs {
		if looped(m.Metadata, r.srcHop, r.dstHop) {
			r.m.looped.Inc()
			r.log.Debug("not forwarding a message that would loop", "id", m.ID, "hops", m.Metadata[HopsKey])
			continue
		}
		srcs = append(srcs, m)
	}
	var dd *batchDedup
	var alone []*relay.Message // forwarded through the per-message chain (dedupbatch.go)
	if r.dedupStore != nil {
		dd = newBatchDedup(r)
		defer dd.releaseRest(ctx)
		srcs, alone = dd.reserve(ctx, srcs, spans != nil)
	}
	var err error
	var failed []int
	if len(srcs) > 0 {
		err = f.publishBatch(ctx, srcs, spans)
		failed = failedCopies(srcs, err)
		dd.commit(ctx, srcs, failed)
	}
	if len(failed) == 0 && len(alone) == 0 {
		dd.countTwins(nil, spans)
		return nil
	}
	if r.cfg.Guarantee == relay.AtMostOnce {
		return f.atMostOnceFailed(ctx, srcs, failed, err, alone, dd, spans)
	}
	var be router.BatchError
	stopping := router.Stopping(ctx)
	single := singles(msgs, srcs, failed, alone)
	dd.releaseIDs(ctx, ids(single)...) // the chain's Dedup reserves them again
	for _, m := range single {
		select {
		case <-stopping:
			// The bridge is stopping: what has not been forwarded alone
			// yet goes back to the source instead of holding the drain.
			if be.Failed == nil {
				be.Failed = map[string]error{}
			}
			why := err
			if slices.Contains(alone, m) {
				why = errNotReserved
			}
			be.Failed[m.ID] = fmt.Errorf("publish to %q: %w (not retried: the route is stopping)", r.cfg.To.Topic, why)
			spans.end(m, be.Failed[m.ID])
			continue
		default:
		}
		_, err := f.single(spans.ctx(ctx, m), m)
		spans.end(m, err)
		if err != nil {
			if be.Failed == nil {
				be.Failed = map[string]error{}
			}
			be.Failed[m.ID] = err
		}
	}
	dd.countTwins(be.Failed, spans)
	if be.Failed == nil {
		return nil
	}
	return &be
}

// publishBatch publishes the copies of srcs in one call, keeping the
// route's metrics, and returns the destination's answer.
func (f *forwarder) publishBatch(ctx context.Context, srcs []*relay.Message, spans *batchSpans) error {
	r := f.r
	copies := make([]*relay.Message, len(srcs))
	made := make([]relay.Message, len(srcs)) // one allocation for the batch's copies
	var size float64
	for i, m := range srcs {
		r.copyInto(&made[i], m)
		copies[i] = &made[i]
		size += float64(len(m.Payload))
	}
	endSends := f.startSends(ctx, spans, srcs, copies)
	r.m.inFlight.Add(float64(len(copies)))
	r.m.inFlightBytes.Add(size)
	start := time.Now()
	err := f.publishAll(ctx, copies)
	endSends(err)
	r.m.inFlight.Sub(float64(len(copies)))
	r.m.inFlightBytes.Sub(size)
	failed := failedCopies(srcs, err)
	if ok := len(srcs) - len(failed); ok > 0 {
		r.m.forwarded.Add(float64(ok))
		lat := time.Since(start).Seconds()
		for range ok {
			r.m.latency.Observe(lat)
		}
		last := lastConfirmed(srcs, failed)
		if t, ok := idTime(last.ID); ok {
			r.m.age.Set(max(0, time.Since(t).Seconds()))
		}
		r.cut.forwarded(last)
	}
	return err
}

// lastConfirmed returns the last message of srcs whose copy the
// destination confirmed, given the ascending indexes of those it did not
// (failed, fewer than len(srcs)).
func lastConfirmed(srcs []*relay.Message, failed []int) *relay.Message {
	last := len(srcs) - 1
	for j := len(failed) - 1; j >= 0 && failed[j] == last; j-- {
		last--
	}
	return srcs[last]
}

// singles returns what a batch forwards alone, in delivery order (msgs):
// the messages of srcs at the indexes failed, and those of alone.
func singles(msgs, srcs []*relay.Message, failed []int, alone []*relay.Message) []*relay.Message {
	if len(alone) == 0 {
		out := make([]*relay.Message, len(failed))
		for j, i := range failed {
			out[j] = srcs[i]
		}
		return out
	}
	pick := make(map[*relay.Message]bool, len(failed)+len(alone))
	for _, i := range failed {
		pick[srcs[i]] = true
	}
	for _, m := range alone {
		pick[m] = true
	}
	out := make([]*relay.Message, 0, len(pick))
	for _, m := range msgs {
		if pick[m] {
			out = append(out, m)
		}
	}
	return out
}

// publishAll publishes copies to the destination in one call, bounded by
// the route's publish timeout.
func (f *forwarder) publishAll(ctx context.Context, copies []*relay.Message) error {
	ctx, cancel := context.WithTimeout(ctx, f.r.cfg.PublishTimeout)
	defer cancel()
	return f.pub.Publish(ctx, f.r.cfg.To.Topic, copies...)
}

// atMostOnceFailed handles the copies of an at-most-once batch that
// failed, and the messages to forward alone (alone). Each is published at
// most once: when the destination refused the whole call before sending
// anything (a limit), the copies are tried one by one so that only the one
// it refuses is lost; otherwise the failed copies are lost.
func (f *forwarder) atMostOnceFailed(ctx context.Context, srcs []*relay.Message, failed []int, err error, alone []*relay.Message, dd *batchDedup, spans *batchSpans) error {
	r := f.r
	var errs []error
	lost := map[string]error{}
	var pe *relay.PublishError
	switch {
	case len(failed) == 0:
	case !rejected(err) || errors.As(err, &pe) || len(failed) == 1:
		r.m.failed.Add(float64(len(failed)))
		r.fail(err)
		err = fmt.Errorf("publish to %q: %w", r.cfg.To.Topic, err)
		errs = append(errs, err)
		for _, i := range failed {
			lost[srcs[i].ID] = err
			spans.end(srcs[i], err)
		}
	default:
		for _, i := range failed {
			if err := f.publishOne(ctx, r.copyOf(srcs[i])); err != nil {
				r.m.failed.Inc()
				r.fail(err)
				err = fmt.Errorf("publish %s to %q: %w", srcs[i].ID, r.cfg.To.Topic, err)
				errs = append(errs, err)
				lost[srcs[i].ID] = err
				spans.end(srcs[i], err)
				continue
			}
			r.m.forwarded.Inc()
			dd.commitIDs(ctx, srcs[i].ID)
		}
	}
	dd.releaseIDs(ctx, ids(singles(nil, srcs, failed, nil))...)
	for _, m := range alone {
		_, err := f.single(spans.ctx(ctx, m), m)
		spans.end(m, err)
		if err != nil {
			errs = append(errs, err)
			lost[m.ID] = err
		}
	}
	dd.countTwins(lost, spans)
	return errors.Join(errs...)
}

// failedCopies returns the indexes in srcs of the messages whose copies
// err says failed: none for nil, those a *relay.PublishError names,
// otherwise all.
func failedCopies(srcs []*relay.Message, err error) []int {
	if err == nil {
		return nil
	}
	var out []int
	var pe *relay.PublishError
	if !errors.As(err, &pe) {
		for i := range srcs {
			out = append(out, i)
		}
		return out
	}
	ids := make(map[string]bool, len(pe.Failed))
	for _, f := range pe.Failed {
		ids[f.ID] = true
	}
	for i, m := range srcs {
		if ids[m.ID] {
			out = append(out, i)
		}
	}
	return out
}

// ids returns the IDs of msgs.
func ids(msgs []*relay.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}
