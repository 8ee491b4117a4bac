package sqs

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/backoff"
)

// visibilityMargin is kept free below SQS's 12-hour visibility cap.
const visibilityMargin = 30 * time.Second

// ackParallel bounds the delete calls of one subscription in flight at once.
const ackParallel = 4

// minEmptyPoll is the shortest cycle of a poller whose ReceiveMessage
// came back empty.
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
	done     atomic.Bool // settled or released: its credit went back
	dead     atomic.Bool // its receipt no longer works: not extended again
	acked    atomic.Bool // queued for deletion (once, even if Settle is retried)
}

// receiver is one subscription: Pollers goroutines long-poll the queue
// and fill a buffer that Receive drains. Credits bound what is received
// ahead plus what is held to InFlight, so no message waits in the buffer
// while its visibility runs out for lack of room downstream.
type receiver struct {
	d       *subDriver
	topic   string
	pollCtx context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	want    int
	buf     chan driver.Received

	mu       sync.Mutex
	queueURL string
	avail    int
	changed  chan struct{} // closed and replaced when credits come back
	buffered map[*handle]struct{}
	attempts map[string]int
	pollErr  error

	ackMu     sync.Mutex
	ackQ      []*handle   // acked, waiting to fill a DeleteMessageBatch call
	ackTimer  *time.Timer // flushes ackQ after AckLinger
	ackClosed bool
	ackSem    chan struct{}  // bounds concurrent delete calls
	ackWG     sync.WaitGroup // deletes in progress
	// ackCtx is the parent of background deletes; Close cancels it when
	// its own ctx ends, so that it does not wait on a hung service.
	ackCtx  context.Context
	ackKill context.CancelFunc
}

func (r *receiver) acquire(n int) bool {
	for {
		r.mu.Lock()
		if r.avail >= n {
			r.avail -= n
			r.mu.Unlock()
			return true
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-r.pollCtx.Done():
			return false
		}
	}
}

func (r *receiver) giveBack(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	r.avail += n
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// finish returns the credits of handles settled or released for the first time.
func (r *receiver) finish(hs []*handle) {
	n := 0
	for _, h := range hs {
		if h.done.CompareAndSwap(false, true) {
			n++
		}
	}
	r.giveBack(n)
}

func (r *receiver) poll() {
	defer r.wg.Done()
	var bo backoff.Backoff
	cfg := r.d.cfg
	wait := int32(0)
	if cfg.Wait > 0 {
		wait = int32(cfg.Wait / time.Second)
	}
	for {
		if !r.acquire(r.want) {
			return
		}
		r.mu.Lock()
		url := r.queueURL
		r.mu.Unlock()
		callStart := time.Now()
		callCtx, cancel := context.WithTimeout(r.pollCtx, cfg.ReceiveTimeout)
		out, err := r.d.c.sqs.ReceiveMessage(callCtx, &sqs.ReceiveMessageInput{
			QueueUrl:              aws.String(url),
			MaxNumberOfMessages:   int32(r.want),
			WaitTimeSeconds:       wait,
			VisibilityTimeout:     int32(cfg.Visibility / time.Second),
			MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{
				sqstypes.MessageSystemAttributeNameApproximateReceiveCount,
				sqstypes.MessageSystemAttributeNameMessageGroupId,
			},
		})
		cancel()
		if err != nil {
			r.giveBack(r.want)
			if r.pollCtx.Err() != nil {
				return
			}
			r.setErr(err)
			if isQueueMissing(err) {
				r.reprovision()
			}
			r.d.log.Warn("relay/sqs: receive failed; retrying", "topic", r.topic, "err", err, "attempt", bo.Attempts()+1)
			if !bo.Sleep(r.pollCtx) {
				return
			}
			continue
		}
		r.setErr(nil)
		bo.Reset()
		r.giveBack(r.want - len(out.Messages))
		if len(out.Messages) == 0 {
			// Short polling (wait=0), or a service answering at once: do not
			// spin on an empty queue.
			if idle := minEmptyPoll - time.Since(callStart); idle > 0 {
				t := time.NewTimer(idle)
				select {
				case <-t.C:
				case <-r.pollCtx.Done():
					t.Stop()
					return
				}
			}
			continue
		}
		now := time.Now()
		for _, sm := range out.Messages {
			rc := r.toReceived(url, sm, now)
			h := rc.Handle.(*handle)
			r.mu.Lock()
			r.buffered[h] = struct{}{}
			r.mu.Unlock()
			select {
			case r.buf <- rc: // never blocks: credits bound the buffer
			case <-r.pollCtx.Done(): // left in buffered; Close releases it
			}
		}
	}
}

func (r *receiver) setErr(err error) {
	r.mu.Lock()
	r.pollErr = err
	r.mu.Unlock()
}

// reprovision finds (or creates) the queue again after it went missing.
func (r *receiver) reprovision() {
	r.d.forget(r.topic)
	url, err := r.d.queueFor(r.pollCtx, r.topic)
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
// forgotten when the message is acked).
func (r *receiver) countAttempt(msgID string, broker int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.attempts) >= maxTrackedAttempts {
		clear(r.attempts)
	}
	r.attempts[msgID]++
	return max(broker, r.attempts[msgID])
}

// Receive implements driver.Receiver.
func (r *receiver) Receive(ctx context.Context, maxN int) ([]driver.Received, error) {
	var out []driver.Received
	select {
	case rc := <-r.buf:
		out = append(out, rc)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
more:
	for len(out) < maxN {
		select {
		case rc := <-r.buf:
			out = append(out, rc)
		default:
			break more
		}
	}
	r.mu.Lock()
	for _, rc := range out {
		delete(r.buffered, rc.Handle.(*handle))
	}
	r.mu.Unlock()
	return out, nil
}

// Settle implements driver.Receiver: nacks become
// ChangeMessageVisibility(Batch) calls to 0 or the delay; acks become
// DeleteMessageBatch calls of ten, waiting up to AckLinger for a call to
// fill, sent in the background (up to ackParallel at once). It returns an
// error only when a visibility call failed as a whole (the shared layer
// then retries); deletes are retried here.
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	var dels []*handle
	var vis []visChange
	all := make([]*handle, 0, len(batch))
	for _, s := range batch {
		h := s.Handle.(*handle)
		all = append(all, h)
		switch {
		case !s.Ack:
			vis = append(vis, visChange{h, r.nackSeconds(h, s.Delay)})
		case h.acked.CompareAndSwap(false, true):
			dels = append(dels, h)
		}
	}
	r.finish(all)
	if len(dels) > 0 {
		r.mu.Lock()
		for _, h := range dels {
			delete(r.attempts, h.msgID)
		}
		r.mu.Unlock()
		if now := r.queueAcks(dels); len(now) > 0 {
			// Delete in the background, a few calls at once, so that
			// settlement keeps up with pollers; blocks when all are busy.
			r.ackSem <- struct{}{}
			r.ackWG.Add(1)
			go func() {
				defer r.ackWG.Done()
				defer func() { <-r.ackSem }()
				ctx, cancel := context.WithTimeout(r.ackCtx, 10*time.Second)
				defer cancel()
				r.deleteWithRetry(ctx, now)
			}()
		}
	}
	return r.d.changeVisibility(ctx, vis)
}

// queueAcks adds acked messages to the delete queue and returns those to
// delete now: every full call's worth (or all of them without a linger).
// The rest wait for the linger timer.
func (r *receiver) queueAcks(hs []*handle) []*handle {
	linger := r.d.cfg.AckLinger
	r.ackMu.Lock()
	defer r.ackMu.Unlock()
	if r.ackClosed {
		return hs
	}
	r.ackQ = append(r.ackQ, hs...)
	n := len(r.ackQ)
	if linger > 0 {
		n -= n % MaxBatch
	}
	now := r.ackQ[:n:n]
	r.ackQ = append([]*handle(nil), r.ackQ[n:]...)
	switch {
	case len(r.ackQ) == 0 && r.ackTimer != nil:
		r.ackTimer.Stop()
		r.ackTimer = nil
	case len(r.ackQ) > 0 && r.ackTimer == nil:
		r.ackTimer = time.AfterFunc(linger, r.flushAcks)
	}
	return now
}

// flushAcks deletes the acks that waited AckLinger (timer goroutine).
func (r *receiver) flushAcks() {
	r.ackMu.Lock()
	if r.ackClosed {
		r.ackMu.Unlock()
		return
	}
	q := r.ackQ
	r.ackQ, r.ackTimer = nil, nil
	r.ackWG.Add(1)
	r.ackMu.Unlock()
	defer r.ackWG.Done()
	ctx, cancel := context.WithTimeout(r.ackCtx, 10*time.Second)
	defer cancel()
	r.deleteWithRetry(ctx, q)
}

// deleteWithRetry deletes hs, retrying calls that failed as a whole
// while ctx allows. What still fails is logged: SQS delivers those
// messages again after their visibility timeout.
func (r *receiver) deleteWithRetry(ctx context.Context, hs []*handle) {
	var bo backoff.Backoff
	for try := 1; ; try++ {
		err := r.d.deleteMessages(ctx, hs)
		if err == nil {
			return
		}
		if try == 3 || !bo.Sleep(ctx) {
			r.d.log.Warn("relay/sqs: deleting acked messages failed; SQS will deliver them again", "topic", r.topic, "count", len(hs), "err", err)
			return
		}
	}
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
	r.finish(hs)
	return r.d.changeVisibility(ctx, vis)
}

// Extend implements driver.Extender: held messages, and those received
// ahead and not yet handed out, get Visibility again (less where SQS's
// 12-hour cap leaves less). A message whose receipt stopped working is
// not extended again.
func (r *receiver) Extend(ctx context.Context, handles []any) error {
	r.mu.Lock()
	hs := make([]*handle, 0, len(handles)+len(r.buffered))
	for h := range r.buffered {
		hs = append(hs, h)
	}
	r.mu.Unlock()
	for _, x := range handles {
		hs = append(hs, x.(*handle))
	}
	var vis []visChange
	for _, h := range hs {
		if h.dead.Load() || h.done.Load() {
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

// Close implements driver.Receiver: it stops the pollers, deletes the
// acks still lingering and makes the messages received ahead visible
// again.
func (r *receiver) Close(ctx context.Context) error {
	defer r.ackKill()
	defer context.AfterFunc(ctx, r.ackKill)()
	r.cancel()
	r.wg.Wait()
	r.ackMu.Lock()
	r.ackClosed = true
	acks := r.ackQ
	r.ackQ = nil
	if r.ackTimer != nil {
		r.ackTimer.Stop()
		r.ackTimer = nil
	}
	r.ackMu.Unlock()
	r.ackWG.Wait()
	if len(acks) > 0 {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r.deleteWithRetry(ctx, acks)
		cancel()
	}
	r.mu.Lock()
	var vis []visChange
	var hs []*handle
	for h := range r.buffered {
		hs = append(hs, h)
		vis = append(vis, visChange{h, 0})
	}
	clear(r.buffered)
	r.mu.Unlock()
	r.finish(hs)
	var err error
	if len(vis) > 0 {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = r.d.changeVisibility(ctx, vis)
		cancel()
	}
	r.d.mu.Lock()
	delete(r.d.active, r)
	r.d.mu.Unlock()
	return err
}
