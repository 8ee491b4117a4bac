package sqs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// visibilityMargin is kept free below SQS's 12-hour visibility cap.
const visibilityMargin = 30 * time.Second

// minEmptyPoll is the shortest cycle of a ReceiveMessage call that came
// back empty.
const minEmptyPoll = 50 * time.Millisecond

// maxTrackedAttempts bounds the in-process receive counts a subscription
// keeps (see receiver.countAttempt).
const maxTrackedAttempts = 10000

// handle is a received message's token for settling it.
type handle struct {
	queueURL string
	receipt  string
	msgID    string // SQS MessageId: stable across redeliveries
	received time.Time
	dead     atomic.Bool // its receipt no longer works: not extended again
	deleted  atomic.Bool // deleted, or refused for good: a retried Settle skips it
}

// receiver is one subscription. Each Receive is one ReceiveMessage call
// (repeated while the queue is empty); the shared layer keeps
// ReceiveLimits of them in flight within its window, and batches and
// retries the settlements.
type receiver struct {
	d     *subDriver
	topic string
	fifo  bool

	mu       sync.Mutex
	queueURL string

	attempts driver.AttemptMemo[string] // receives seen, by message ID (see countAttempt)
}

// ReceiveLimits implements driver.ReceiveLimiter: MaxMessages per call,
// Pollers calls at once (1 on a FIFO queue unless set, so that the order
// within a message group never depends on which call returned first).
func (r *receiver) ReceiveLimits() (maxPerCall, concurrent int) {
	concurrent = r.d.cfg.Pollers
	if concurrent == 0 {
		concurrent = DefaultPollers
		if r.fifo {
			concurrent = 1
		}
	}
	return r.d.cfg.MaxMessages, concurrent
}

// Receive implements driver.Receiver: one ReceiveMessage call for up to
// maxN messages, long-polling Wait. An empty answer returns no messages
// and no error (after minEmptyPoll at least, so that short polling does
// not spin), so that the shared layer sees the call succeed: a
// subscription's health clears once the service answers again, even with
// nothing to deliver.
func (r *receiver) Receive(ctx context.Context, maxN int) ([]driver.Received, error) {
	cfg := r.d.cfg
	wait := int32(0)
	if cfg.Wait > 0 {
		wait = int32(cfg.Wait / time.Second)
	}
	r.mu.Lock()
	url := r.queueURL
	r.mu.Unlock()
	callStart := time.Now()
	callCtx, cancel := context.WithTimeout(ctx, cfg.ReceiveTimeout)
	// On a FIFO queue each call carries its own attempt ID, which the SDK
	// sends again when it retries the call: should an answer be lost on
	// the way (the messages already in flight at the service), the retry
	// gets the same messages instead of leaving them invisible for the
	// visibility timeout. Standard queues have no such ID.
	var attemptID *string
	if r.fifo {
		attemptID = aws.String(relay.NewID())
	}
	out, err := r.d.c.sqs.ReceiveMessage(callCtx, &sqs.ReceiveMessageInput{
		ReceiveRequestAttemptId: attemptID,
		QueueUrl:                aws.String(url),
		MaxNumberOfMessages:     int32(min(maxN, MaxBatch)),
		WaitTimeSeconds:         wait,
		VisibilityTimeout:       int32(cfg.Visibility / time.Second),
		MessageAttributeNames:   []string{"All"},
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{
			sqstypes.MessageSystemAttributeNameApproximateReceiveCount,
			sqstypes.MessageSystemAttributeNameMessageGroupId,
		},
	})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if isQueueMissing(err) {
			r.reprovision(ctx)
		}
		return nil, fmt.Errorf("relay/sqs: receiving from %q: %w", r.topic, err)
	}
	if len(out.Messages) == 0 {
		// Short polling (wait=0), or a service answering at once: do not
		// spin on an empty queue.
		if idle := minEmptyPoll - time.Since(callStart); idle > 0 {
			t := time.NewTimer(idle)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		return nil, nil
	}
	now := time.Now()
	batch := make([]driver.Received, len(out.Messages))
	for i, sm := range out.Messages {
		batch[i] = r.toReceived(url, sm, now)
	}
	return batch, nil
}

// reprovision finds (or creates) the queue again after it went missing.
func (r *receiver) reprovision(ctx context.Context) {
	r.d.forget(r.topic)
	url, err := r.d.queueFor(ctx, r.topic)
	if err != nil {
		r.d.log.Warn("relay/sqs: the queue is gone and could not be provisioned again", "topic", r.topic, "err", err)
		return
	}
	r.mu.Lock()
	r.queueURL = url
	r.mu.Unlock()
	r.d.log.Info("relay/sqs: the queue was gone; provisioned it again", "topic", r.topic)
}

func (r *receiver) toReceived(url string, sm sqstypes.Message, now time.Time) driver.Received {
	attrs := make(map[string]string, len(sm.MessageAttributes))
	for k, v := range sm.MessageAttributes {
		if v.BinaryValue != nil || strings.HasPrefix(aws.ToString(v.DataType), "Binary") {
			attrs[k] = string(v.BinaryValue)
		} else {
			attrs[k] = aws.ToString(v.StringValue)
		}
	}
	rcv := received{
		body:    aws.ToString(sm.Body),
		attrs:   attrs,
		msgID:   aws.ToString(sm.MessageId),
		groupID: sm.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)],
	}
	if !r.d.cfg.NoUnwrapSNS {
		if u, ok := unwrapSNS(rcv); ok {
			rcv = u
		}
	}
	broker, _ := strconv.Atoi(sm.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
	h := &handle{queueURL: url, receipt: aws.ToString(sm.ReceiptHandle), msgID: aws.ToString(sm.MessageId), received: now}
	return driver.Received{Msg: decode(rcv), Attempt: r.countAttempt(h.msgID, broker), Handle: h}
}

// countAttempt returns the attempt number of a delivery: SQS's
// ApproximateReceiveCount, or the receives this subscription saw of the
// message if that is higher (emulators that do not count; the count is
// forgotten when the message is acked, and the oldest counts first past
// maxTrackedAttempts).
func (r *receiver) countAttempt(msgID string, broker int) int {
	return max(broker, r.attempts.Count(msgID))
}

// Settle implements driver.Receiver: acks become DeleteMessageBatch calls
// of ten, nacks ChangeMessageVisibility(Batch) calls to 0 or the delay,
// both several calls at once. It returns an error when a call (or an
// entry worth trying again) failed; the shared layer then retries the
// batch, and messages already deleted are not deleted again.
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	var dels []*handle
	var vis []visChange
	for _, s := range batch {
		h := s.Handle.(*handle)
		switch {
		case !s.Ack:
			vis = append(vis, visChange{h, r.nackSeconds(h, s.Delay)})
		case !h.deleted.Load():
			dels = append(dels, h)
		}
	}
	for _, h := range dels {
		r.attempts.Forget(h.msgID)
	}
	var wg sync.WaitGroup
	var delErr error
	if len(dels) > 0 && len(vis) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			delErr = r.d.deleteMessages(ctx, dels)
		}()
	} else if len(dels) > 0 {
		delErr = r.d.deleteMessages(ctx, dels)
	}
	visErr := r.d.changeVisibility(ctx, vis)
	wg.Wait()
	return errors.Join(delErr, visErr)
}

// nackSeconds is the visibility timeout that redelivers h after delay:
// whole seconds, rounded up, within what SQS's 12-hour cap leaves.
func (r *receiver) nackSeconds(h *handle, delay time.Duration) int32 {
	if delay <= 0 {
		return 0
	}
	secs := int64(math.Ceil(delay.Seconds()))
	limit := int64((MaxVisibility - time.Since(h.received) - visibilityMargin) / time.Second)
	if secs > limit {
		r.d.log.Warn("relay/sqs: NackAfter delay capped: SQS keeps a received message invisible for at most 12h from its receipt",
			"topic", r.topic, "delay", delay, "capped_to", time.Duration(max(limit, 0))*time.Second)
		secs = max(limit, 0)
	}
	return int32(secs)
}

// Release implements driver.Receiver: the messages become visible at once.
func (r *receiver) Release(ctx context.Context, handles []any) error {
	hs := make([]*handle, len(handles))
	vis := make([]visChange, len(handles))
	for i, x := range handles {
		hs[i] = x.(*handle)
		vis[i] = visChange{hs[i], 0}
	}
	return r.d.changeVisibility(ctx, vis)
}

// Extend implements driver.Extender: held messages get Visibility again
// (less where SQS's 12-hour cap leaves less). A message whose receipt
// stopped working is not extended again.
func (r *receiver) Extend(ctx context.Context, handles []any) error {
	var vis []visChange
	for _, x := range handles {
		h := x.(*handle)
		if h.dead.Load() {
			continue
		}
		left := MaxVisibility - time.Since(h.received) - visibilityMargin
		secs := int32(min(r.d.cfg.Visibility, left) / time.Second)
		if secs < 1 {
			h.dead.Store(true)
			r.d.log.Warn("relay/sqs: message held for 12h, SQS's limit; it becomes visible again", "topic", r.topic, "sqs_message_id", h.msgID)
			continue
		}
		vis = append(vis, visChange{h, secs})
	}
	return r.d.changeVisibility(ctx, vis)
}

// Close implements driver.Receiver: nothing is held here.
func (r *receiver) Close(context.Context) error { return nil }
