package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/backoff"
	"github.com/go-relay/relay/internal/driver"
)

// pubDriver is the broker half of an sqs:// or sns:// publisher.
type pubDriver struct {
	scheme string
	cfg    Config
	c      *clients
	topo   *topology
	caps   relay.Capabilities
	log    *slog.Logger

	noBatch  atomic.Bool  // the service lacks SendMessageBatch / PublishBatch
	batchMax atomic.Int32 // entries per batch call the service takes, when below MaxBatch
	lastErr  atomic.Pointer[error]
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

func (d *pubDriver) Close() error {
	d.c.close()
	return nil
}

// Health implements relay.HealthChecker: the error of the latest failed
// call to the service, nil after a success.
func (d *pubDriver) Health() error {
	if p := d.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (d *pubDriver) noteCall(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		d.lastErr.Store(nil)
		return
	}
	d.lastErr.Store(&err)
}

// ValidateTopic implements driver.TopicValidator.
func (d *pubDriver) ValidateTopic(topic string) error {
	return validateName(d.scheme, topic, d.cfg.FIFO)
}

// ValidateMessage implements driver.MessageValidator: a FIFO topic needs a
// Key, and the encoded message must fit MaxBytes.
func (d *pubDriver) ValidateMessage(topic string, m *relay.Message) error {
	if isFIFO(topic) && m.Key == "" {
		return &relay.LimitError{MessageID: m.ID, What: "key",
			Detail: fmt.Sprintf("required on FIFO %s %q: the Key is the MessageGroupId that orders messages", d.noun(), topic)}
	}
	return driver.SizeError(m, encodedSize(m), d.cfg.MaxBytes)
}

func (d *pubDriver) noun() string {
	if d.scheme == SchemeSNS {
		return "topic"
	}
	return "queue"
}

// SendBatch implements driver.PublishDriver; SendAll does the work.
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	return d.SendAll(ctx, topic, msgs)
}

// outgoing is one message on its way.
type outgoing struct {
	m   *relay.Message
	e   encoded
	err error // set when it failed
}

// chunk is one batch call's worth of messages.
type chunk struct {
	items []*outgoing
	bytes int
	after []*chunk      // FIFO: earlier chunks holding the same message groups
	done  chan struct{} // closed when sent (or given up)
}

// SendAll implements driver.WholeSender: the messages are packed into
// batches of at most 10 entries and MaxBytes, which are sent concurrently
// (up to SendConcurrency at a time). On a FIFO topic a batch waits for the
// earlier batches holding messages of the same group, so each group's
// messages are sent in order; if one of them fails, the group's later
// messages in this call are not sent and are reported failed too.
func (d *pubDriver) SendAll(ctx context.Context, topic string, msgs []*relay.Message) error {
	fifo := isFIFO(topic)
	items := make([]*outgoing, len(msgs))
	for i, m := range msgs {
		items[i] = &outgoing{m: m, e: encode(m, false)}
	}
	chunks := pack(items, d.cfg.MaxBytes, fifo)

	sem := make(chan struct{}, d.cfg.SendConcurrency)
	var wg sync.WaitGroup
	for _, c := range chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(c.done)
			// FIFO: wait for the earlier batches of the same groups; a
			// group with a failed message sends nothing more.
			blocked := map[string]bool{}
			for _, dep := range c.after {
				<-dep.done
				for _, it := range dep.items {
					if it.err != nil {
						blocked[it.m.Key] = true
					}
				}
			}
			send := c.items
			if len(blocked) > 0 {
				send = nil
				for _, it := range c.items {
					if blocked[it.m.Key] {
						it.err = fmt.Errorf("relay/sqs: not sent: an earlier message with Key %q failed, and sending this one would break the order of its MessageGroupId", it.m.Key)
					} else {
						send = append(send, it)
					}
				}
				if len(send) == 0 {
					return
				}
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				for _, it := range send {
					it.err = ctx.Err()
				}
				return
			}
			d.sendChunk(ctx, topic, send)
			<-sem
		}()
	}
	wg.Wait()

	var failed []relay.MessageFailure
	for _, it := range items {
		if it.err != nil {
			failed = append(failed, relay.MessageFailure{ID: it.m.ID, Err: it.err})
		}
	}
	switch {
	case len(failed) == 0:
		return nil
	case len(failed) == len(items) && len(chunks) == 1 && !isEntryError(failed[0].Err):
		return failed[0].Err // one call, failed as a whole: the plain error
	}
	return &relay.PublishError{Failed: failed}
}

func isEntryError(err error) bool {
	var ee *EntryError
	return errors.As(err, &ee)
}

// pack splits items, in order, into chunks of at most MaxBatch entries and
// maxBytes. With fifo, each chunk records the earlier chunks that hold
// messages of its groups.
func pack(items []*outgoing, maxBytes int, fifo bool) []*chunk {
	var chunks []*chunk
	var cur *chunk
	for _, it := range items {
		if cur == nil || len(cur.items) == MaxBatch || cur.bytes+it.e.size > maxBytes {
			cur = &chunk{done: make(chan struct{})}
			chunks = append(chunks, cur)
		}
		cur.items = append(cur.items, it)
		cur.bytes += it.e.size
	}
	if fifo {
		last := map[string]*chunk{}
		for _, c := range chunks {
			seen := map[*chunk]bool{}
			for _, it := range c.items {
				if prev := last[it.m.Key]; prev != nil && prev != c && !seen[prev] {
					seen[prev] = true
					c.after = append(c.after, prev)
				}
			}
			for _, it := range c.items {
				last[it.m.Key] = c
			}
		}
	}
	return chunks
}

// sendChunk sends one chunk's items, setting err on the items that
// failed. A call that fails in transit (network, throttling, a service
// fault) is sent again with backoff until ctx ends: publishing waits for
// the service instead of failing at once. Entries that failed through no
// fault of the request are sent again (twice at most; never on FIFO,
// where that would reorder); a missing queue or topic is looked up (or
// created) again once.
func (d *pubDriver) sendChunk(ctx context.Context, topic string, items []*outgoing) {
	todo := items
	var entryBackoff, callBackoff backoff.Backoff
	recreated := false
	for entryTries := 0; ; {
		err := d.sendOnce(ctx, topic, todo)
		d.noteCall(err)
		if err != nil {
			missing := isQueueMissing(err) || isTopicMissing(err)
			if missing && !recreated && ctx.Err() == nil {
				recreated = true
				d.forget(topic)
				continue
			}
			if isTransient(err) && ctx.Err() == nil {
				d.log.Debug("relay/sqs: send failed; retrying", "topic", topic, "err", err, "attempt", callBackoff.Attempts()+1)
				if callBackoff.Sleep(ctx) {
					continue
				}
				err = fmt.Errorf("%w; gave up: %w", err, ctx.Err())
			}
			for _, it := range todo {
				it.err = fmt.Errorf("relay/sqs: sending to %s %q: %w", d.noun(), topic, err)
			}
			return
		}
		callBackoff.Reset()
		if isFIFO(topic) {
			return // resending some entries of a FIFO batch would reorder their group
		}
		var retry []*outgoing
		for _, it := range todo {
			var ee *EntryError
			if errors.As(it.err, &ee) && !isPermanentCode(ee.Code, ee.SenderFault) {
				retry = append(retry, it)
			}
		}
		entryTries++
		if len(retry) == 0 || entryTries > 2 || !entryBackoff.Sleep(ctx) {
			return
		}
		for _, it := range retry {
			it.err = nil
		}
		todo = retry
	}
}

func (d *pubDriver) forget(topic string) {
	if d.scheme == SchemeSNS {
		d.topo.forgetTopic(topic)
	} else {
		d.topo.forgetQueue(topic)
	}
}

// sendOnce makes one batch call (or, where the service lacks it, single
// calls) for items. It sets err on the items whose entry failed and
// returns the error that failed the call as a whole.
func (d *pubDriver) sendOnce(ctx context.Context, topic string, items []*outgoing) error {
	if limit := int(d.batchMax.Load()); limit > 0 && len(items) > limit {
		for lo := 0; lo < len(items); lo += limit {
			if err := d.sendOnce(ctx, topic, items[lo:min(lo+limit, len(items))]); err != nil {
				return err
			}
		}
		return nil
	}
	err := d.sendBatchOrSingles(ctx, topic, items)
	if isTooManyEntries(err) && len(items) > 1 {
		// Emulators may take fewer entries than AWS's ten (goaws's
		// PublishBatch takes nine): remember, and send smaller calls.
		d.batchMax.Store(int32(len(items) - 1))
		d.log.Info("relay/sqs: the service takes fewer entries per batch call than AWS; sending smaller batches", "topic", topic, "entries", len(items)-1)
		return d.sendOnce(ctx, topic, items)
	}
	return err
}

func isTooManyEntries(err error) bool {
	var tm *sqstypes.TooManyEntriesInBatchRequest
	return errors.As(err, &tm) || strings.HasSuffix(apiCode(err), "TooManyEntriesInBatchRequest")
}

func (d *pubDriver) sendBatchOrSingles(ctx context.Context, topic string, items []*outgoing) error {
	if d.scheme == SchemeSNS {
		arn, err := d.topo.topicArn(ctx, topic)
		if err != nil {
			return err
		}
		if !d.noBatch.Load() {
			err := d.publishBatch(ctx, arn, topic, items)
			if err == nil || !isUnsupported(err) {
				return err
			}
			d.noBatch.Store(true)
			d.log.Info("relay/sqs: the service has no PublishBatch; publishing one message per call", "topic", topic)
		}
		return d.publishSingles(ctx, arn, topic, items)
	}
	url, err := d.topo.queueURL(ctx, topic)
	if err != nil {
		return err
	}
	if !d.noBatch.Load() {
		err := d.sendMessageBatch(ctx, url, topic, items)
		if err == nil || !isUnsupported(err) {
			return err
		}
		d.noBatch.Store(true)
		d.log.Info("relay/sqs: the service has no SendMessageBatch; sending one message per call", "queue", topic)
	}
	return d.sendSingles(ctx, url, topic, items)
}

func sqsAttrs(a map[string]string) map[string]sqstypes.MessageAttributeValue {
	out := make(map[string]sqstypes.MessageAttributeValue, len(a))
	for k, v := range a {
		out[k] = sqstypes.MessageAttributeValue{DataType: aws.String(attrTypeText), StringValue: aws.String(v)}
	}
	return out
}

func snsAttrs(a map[string]string) map[string]snstypes.MessageAttributeValue {
	out := make(map[string]snstypes.MessageAttributeValue, len(a))
	for k, v := range a {
		out[k] = snstypes.MessageAttributeValue{DataType: aws.String(attrTypeText), StringValue: aws.String(v)}
	}
	return out
}

func (d *pubDriver) sendMessageBatch(ctx context.Context, url, topic string, items []*outgoing) error {
	fifo := isFIFO(topic)
	entries := make([]sqstypes.SendMessageBatchRequestEntry, len(items))
	for i, it := range items {
		entries[i] = sqstypes.SendMessageBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			MessageBody:       aws.String(it.e.body),
			MessageAttributes: sqsAttrs(it.e.attrs),
		}
		if fifo {
			entries[i].MessageGroupId = aws.String(fifoID(it.m.Key))
			entries[i].MessageDeduplicationId = aws.String(fifoID(it.m.ID))
		}
	}
	out, err := d.c.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil {
		return err
	}
	// An entry not listed as failed was accepted: the call succeeded, and
	// Failed names the exceptions. (goaws reports its successes under
	// another JSON key, so Successful cannot be relied on.)
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(items) {
			items[i].err = &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		}
	}
	return nil
}

func (d *pubDriver) sendSingles(ctx context.Context, url, topic string, items []*outgoing) error {
	fifo := isFIFO(topic)
	for i, it := range items {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(it.e.body), MessageAttributes: sqsAttrs(it.e.attrs)}
		if fifo {
			in.MessageGroupId = aws.String(fifoID(it.m.Key))
			in.MessageDeduplicationId = aws.String(fifoID(it.m.ID))
		}
		if _, err := d.c.sqs.SendMessage(ctx, in); err != nil {
			if i == 0 && apiCode(err) == "" || isQueueMissing(err) {
				return err // nothing sent yet, or the queue is gone: a whole-call failure
			}
			it.err = err
		}
	}
	return nil
}

func (d *pubDriver) publishBatch(ctx context.Context, arn, topic string, items []*outgoing) error {
	fifo := isFIFO(topic)
	entries := make([]snstypes.PublishBatchRequestEntry, len(items))
	for i, it := range items {
		entries[i] = snstypes.PublishBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			Message:           aws.String(it.e.body),
			MessageAttributes: snsAttrs(it.e.attrs),
		}
		if fifo {
			entries[i].MessageGroupId = aws.String(fifoID(it.m.Key))
			entries[i].MessageDeduplicationId = aws.String(fifoID(it.m.ID))
		}
	}
	out, err := d.c.sns.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(arn), PublishBatchRequestEntries: entries})
	if err != nil {
		return err
	}
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(items) {
			items[i].err = &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		}
	}
	return nil
}

func (d *pubDriver) publishSingles(ctx context.Context, arn, topic string, items []*outgoing) error {
	fifo := isFIFO(topic)
	for i, it := range items {
		in := &sns.PublishInput{TopicArn: aws.String(arn), Message: aws.String(it.e.body), MessageAttributes: snsAttrs(it.e.attrs)}
		if fifo {
			in.MessageGroupId = aws.String(fifoID(it.m.Key))
			in.MessageDeduplicationId = aws.String(fifoID(it.m.ID))
		}
		if _, err := d.c.sns.Publish(ctx, in); err != nil {
			if i == 0 && apiCode(err) == "" || isTopicMissing(err) {
				return err
			}
			it.err = err
		}
	}
	return nil
}
