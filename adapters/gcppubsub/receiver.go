package gcppubsub

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// maxAckRequestBytes bounds the ack IDs of one Acknowledge or
// ModifyAckDeadline request, below the service's 512 KiB per request.
const maxAckRequestBytes = 400_000

// receiver is one subscription: Pull calls on the group's subscription to
// one topic, and Acknowledge and ModifyAckDeadline calls to settle.
type receiver struct {
	d     *subDriver
	topic string
	path  string
}

// handle is the settlement token of one delivery.
type handle struct {
	ackID string
	msgID string // Pub/Sub's message ID, the key of the attempt memo
	// attempt as delivered; counted says that Pub/Sub counted it
	// (DeliveryAttempt, set where the subscription has a dead-letter
	// policy), so that the memo need not.
	attempt int
	counted bool
}

// ReceiveLimits implements driver.ReceiveLimiter: at most 1000 messages a
// Pull, pullers= calls in flight (default 1, and 1 when ordered, so that
// a key's messages are delivered in order).
func (r *receiver) ReceiveLimits() (maxPerCall, concurrent int) {
	return MaxBatch, r.d.conn.cfg.Pullers
}

// Receive makes one Pull call for up to max messages. The service holds
// a Pull that finds nothing for a while and then answers with nothing or
// with DEADLINE_EXCEEDED, both of which return no messages and no error;
// a call that the service did not answer within receive_timeout fails.
// A subscription deleted meanwhile is created again, so that the next
// call finds it.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	cfg := &r.d.conn.cfg
	cctx, cancel := context.WithTimeout(ctx, cfg.ReceiveTimeout)
	resp, err := r.d.conn.subs.Pull(cctx, &pb.PullRequest{Subscription: r.path, MaxMessages: int32(min(max, MaxBatch))}, noRetry)
	silent := cctx.Err() != nil
	cancel()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case code(err) == codes.DeadlineExceeded && !silent:
		return nil, nil
	case code(err) == codes.NotFound:
		if _, eerr := r.d.ensure(ctx, r.topic); eerr != nil {
			err = errors.Join(err, eerr)
		}
		return nil, fmt.Errorf("relay/gcppubsub: pulling from %q: %w", r.path, err)
	case silent:
		return nil, fmt.Errorf("relay/gcppubsub: pulling from %q: no answer within receive_timeout %v: %w", r.path, cfg.ReceiveTimeout, err)
	default:
		return nil, fmt.Errorf("relay/gcppubsub: pulling from %q: %w", r.path, err)
	}
	out := make([]driver.Received, len(resp.GetReceivedMessages()))
	for i, rm := range resp.GetReceivedMessages() {
		h := &handle{ackID: rm.GetAckId(), msgID: rm.GetMessage().GetMessageId(), attempt: int(rm.GetDeliveryAttempt())}
		h.counted = h.attempt > 0
		if !h.counted {
			h.attempt = r.d.attempts.Take(h.msgID) + 1
		}
		out[i] = driver.Received{Msg: decode(rm), Attempt: h.attempt, Handle: h}
	}
	return out, nil
}

// Settle acknowledges the acks with Acknowledge and nacks with
// ModifyAckDeadline: deadline 0 for a Nack (redelivered at once), the
// delay rounded up to whole seconds for NackAfter (Pub/Sub redelivers the
// message when its deadline passes; at most MaxNackDelay, which the
// shared layer keeps to).
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	var acks []string
	var nacks map[int32][]string
	for _, s := range batch {
		h := s.Handle.(*handle)
		if s.Ack {
			acks = append(acks, h.ackID)
			continue
		}
		r.remember(h)
		secs := int32((s.Delay + time.Second - 1) / time.Second)
		if nacks == nil {
			nacks = make(map[int32][]string, 1)
		}
		nacks[secs] = append(nacks[secs], h.ackID)
	}
	var errs []error
	if len(acks) > 0 {
		errs = append(errs, r.call(ctx, acks, func(ctx context.Context, ids []string) error {
			return r.d.conn.subs.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: r.path, AckIds: ids}, noRetry)
		}))
	}
	for secs, ids := range nacks {
		errs = append(errs, r.modify(ctx, ids, secs))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("relay/gcppubsub: settling %d messages of %q: %w", len(batch), r.path, err)
	}
	return nil
}

// remember records the attempt of a message leaving the subscription
// unacked, where Pub/Sub does not count deliveries.
func (r *receiver) remember(h *handle) {
	if !h.counted {
		r.d.attempts.Remember(h.msgID, h.attempt)
	}
}

// modify sets the ack deadline of ids to secs seconds from now.
func (r *receiver) modify(ctx context.Context, ids []string, secs int32) error {
	return r.call(ctx, ids, func(ctx context.Context, ids []string) error {
		return r.d.conn.subs.ModifyAckDeadline(ctx, &pb.ModifyAckDeadlineRequest{Subscription: r.path, AckIds: ids, AckDeadlineSeconds: secs}, noRetry)
	})
}

// call makes f's request for ids in as many requests as the service's
// request size requires, and returns their errors joined.
func (r *receiver) call(ctx context.Context, ids []string, f func(context.Context, []string) error) error {
	var errs []error
	for start := 0; start < len(ids); {
		end, size := start, 0
		for end < len(ids) && (end == start || size+len(ids[end])+8 <= maxAckRequestBytes) {
			size += len(ids[end]) + 8
			end++
		}
		errs = append(errs, f(ctx, ids[start:end]))
		start = end
	}
	return errors.Join(errs...)
}

// Release hands unsettled messages back at once: ack deadline 0.
func (r *receiver) Release(ctx context.Context, handles []any) error {
	ids := make([]string, len(handles))
	for i, x := range handles {
		h := x.(*handle)
		r.remember(h)
		ids[i] = h.ackID
	}
	if err := r.modify(ctx, ids, 0); err != nil {
		return fmt.Errorf("relay/gcppubsub: releasing %d messages of %q: %w", len(ids), r.path, err)
	}
	return nil
}

// Extend implements driver.Extender: the ack deadline of messages in work
// is set to ack_deadline from now.
func (r *receiver) Extend(ctx context.Context, handles []any) error {
	ids := make([]string, len(handles))
	for i, x := range handles {
		ids[i] = x.(*handle).ackID
	}
	if err := r.modify(ctx, ids, int32(r.d.conn.cfg.AckDeadline/time.Second)); err != nil {
		return fmt.Errorf("relay/gcppubsub: extending %d leases of %q: %w", len(ids), r.path, err)
	}
	return nil
}

// Close has nothing to end: no call outlives Receive, Settle or Release,
// and the subscription stays for the group.
func (r *receiver) Close(context.Context) error { return nil }

var _ interface {
	driver.Receiver
	driver.Extender
	driver.ReceiveLimiter
} = (*receiver)(nil)

var _ relay.HealthChecker = (*pubDriver)(nil)
