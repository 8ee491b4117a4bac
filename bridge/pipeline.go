package bridge

import (
	"context"
	"errors"
	"fmt"
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
// nacked (a *router.BatchError names it).

// pipelined reports whether the route forwards in batches: at-least-once
// and at-most-once routes with a batch size above 1, without Dedup (its
// reservation is per message) and without OpenTelemetry instrumentation
// (its spans are per message). The others forward one message per handler
// call through the batcher.
func (r *route) pipelined() bool {
	return r.cfg.Guarantee != relay.ExactlyOnce && r.cfg.Batch > 1 && r.cfg.Dedup == nil && !r.tel.enabled()
}

// lanes is how many batches a pipelined route publishes at once: enough
// for Concurrency messages in batches of Batch, at least 1.
func (r *route) lanes() int {
	return max(1, (r.cfg.Concurrency+r.cfg.Batch-1)/r.cfg.Batch)
}

// addPipelined binds the pipelined forwarder to the source.
func (r *route) addPipelined(rt *router.Router, sub relay.Subscriber, f *forwarder, chain router.Handler) error {
	f.single = chain
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
	srcs := make([]*relay.Message, 0, len(msgs))
	copies := make([]*relay.Message, 0, len(msgs))
	var size float64
	for _, m := range msgs {
		if looped(m.Metadata, r.srcHop, r.dstHop) {
			r.m.looped.Inc()
			r.log.Debug("not forwarding a message that would loop", "id", m.ID, "hops", m.Metadata[HopsKey])
			continue
		}
		srcs = append(srcs, m)
		copies = append(copies, r.copyOf(m))
		size += float64(len(m.Payload))
	}
	if len(copies) == 0 {
		return nil
	}
	r.m.inFlight.Add(float64(len(copies)))
	r.m.inFlightBytes.Add(size)
	start := time.Now()
	err := f.publishAll(ctx, copies)
	r.m.inFlight.Sub(float64(len(copies)))
	r.m.inFlightBytes.Sub(size)
	failed := failedCopies(srcs, err)
	if ok := len(srcs) - len(failed); ok > 0 {
		r.m.forwarded.Add(float64(ok))
		lat := time.Since(start).Seconds()
		for range ok {
			r.m.latency.Observe(lat)
		}
		if t, ok := idTime(srcs[len(srcs)-1].ID); ok {
			r.m.age.Set(max(0, time.Since(t).Seconds()))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	if r.cfg.Guarantee == relay.AtMostOnce {
		return f.atMostOnceFailed(ctx, srcs, failed, err)
	}
	var be router.BatchError
	stopping := router.Stopping(ctx)
	for _, i := range failed {
		m := srcs[i]
		select {
		case <-stopping:
			// The bridge is stopping: what has not been forwarded alone
			// yet goes back to the source instead of holding the drain.
			if be.Failed == nil {
				be.Failed = map[string]error{}
			}
			be.Failed[m.ID] = fmt.Errorf("publish to %q: %w (not retried: the route is stopping)", r.cfg.To.Topic, err)
			continue
		default:
		}
		if _, err := f.single(ctx, m); err != nil {
			if be.Failed == nil {
				be.Failed = map[string]error{}
			}
			be.Failed[m.ID] = err
		}
	}
	if be.Failed == nil {
		return nil
	}
	return &be
}

// publishAll publishes copies to the destination in one call, bounded by
// the route's publish timeout.
func (f *forwarder) publishAll(ctx context.Context, copies []*relay.Message) error {
	ctx, cancel := context.WithTimeout(ctx, f.r.cfg.PublishTimeout)
	defer cancel()
	return f.pub.Publish(ctx, f.r.cfg.To.Topic, copies...)
}

// atMostOnceFailed handles the copies of an at-most-once batch that
// failed. Each is published at most once: when the destination refused
// the whole call before sending anything (a limit), the copies are tried
// one by one so that only the one it refuses is lost; otherwise the
// failed copies are lost.
func (f *forwarder) atMostOnceFailed(ctx context.Context, srcs []*relay.Message, failed []int, err error) error {
	r := f.r
	var pe *relay.PublishError
	if !rejected(err) || errors.As(err, &pe) || len(failed) == 1 {
		r.m.failed.Add(float64(len(failed)))
		r.fail(err)
		return fmt.Errorf("publish to %q: %w", r.cfg.To.Topic, err)
	}
	var errs []error
	for _, i := range failed {
		if err := f.publishOne(ctx, r.copyOf(srcs[i])); err != nil {
			r.m.failed.Inc()
			r.fail(err)
			errs = append(errs, fmt.Errorf("publish %s to %q: %w", srcs[i].ID, r.cfg.To.Topic, err))
			continue
		}
		r.m.forwarded.Inc()
	}
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
