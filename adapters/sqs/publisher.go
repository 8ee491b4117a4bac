package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// pubDriver is the broker half of an sqs:// or sns:// publisher.
type pubDriver struct {
	endpoint
	api publishAPI

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
// Key and takes no delayed message, and the encoded message must fit
// MaxBytes.
func (d *pubDriver) ValidateMessage(topic string, m *relay.Message) error {
	if isFIFO(topic) && m.Key == "" {
		return &relay.LimitError{MessageID: m.ID, What: "key",
			Detail: fmt.Sprintf("required on FIFO %s %q: the Key is the MessageGroupId that orders messages", d.noun(), topic)}
	}
	if isFIFO(topic) && !m.DeliverAt.IsZero() {
		if delay, ok := driver.Delay(m, time.Now()); ok {
			return fmt.Errorf("relay/sqs: message %s due in %v on FIFO queue %q: FIFO queues take no per-message DelaySeconds (use a standard queue, or the queue's own DelaySeconds attribute): %w",
				m.ID, delay.Round(time.Millisecond), topic, relay.ErrDelayUnsupported)
		}
	}
	return driver.SizeError(m, encodedSize(m), d.caps)
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

// MaxDeliverDelay is the longest Message.DeliverAt ahead SQS takes:
// DelaySeconds is at most 900.
const MaxDeliverDelay = 15 * time.Minute

// outgoing is one message on its way.
type outgoing struct {
	m     *relay.Message
	e     encoded
	delay int32 // DelaySeconds: DeliverAt rounded up to whole seconds
	err   error // set when it failed
}

// delaySeconds is DelaySeconds for m: how far ahead of now its DeliverAt
// is, rounded up to the second so that it is never delivered early
// (0 for none). A send retried later keeps it, so arrives later still.
func delaySeconds(m *relay.Message, now time.Time) int32 {
	d, ok := driver.Delay(m, now)
	if !ok {
		return 0
	}
	return int32(min((d+time.Second-1)/time.Second, MaxDeliverDelay/time.Second))
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
	var now time.Time
	for i, m := range msgs {
		items[i] = &outgoing{m: m, e: encode(m, false)}
		if !m.DeliverAt.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			items[i].delay = delaySeconds(m, now)
		}
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
			blocked := map[string]error{} // Key -> an earlier failure, permanent ones first
			for _, dep := range c.after {
				<-dep.done
				for _, it := range dep.items {
					if prev, ok := blocked[it.m.Key]; it.err != nil && (!ok || driver.IsRetryable(prev)) {
						blocked[it.m.Key] = it.err
					}
				}
			}
			send := c.items
			if len(blocked) > 0 {
				send = nil
				for _, it := range c.items {
					if cause, ok := blocked[it.m.Key]; ok {
						it.err = fmt.Errorf("relay/sqs: not sent: an earlier message with Key %q failed, and sending this one would break the order of its MessageGroupId", it.m.Key)
						if driver.IsRetryable(cause) {
							// Sent again with the earlier one, after it.
							it.err = driver.Retryable(it.err)
						}
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
	return driver.SendError(len(items), failed, isEntryError)
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

// sendChunk makes one attempt at one chunk's items, setting err on the
// items that failed. A call that failed in transit (network, throttling,
// a service fault) fails its items with a driver.Retryable error, so that
// the shared publisher sends them again with backoff until ctx ends:
// publishing waits for the service instead of failing at once. Entries
// that failed through no fault of the request are marked Retryable too,
// except on FIFO, where resending some entries of a batch would reorder
// their group. A missing queue or topic is looked up (or created) again
// once within the attempt.
func (d *pubDriver) sendChunk(ctx context.Context, topic string, items []*outgoing) {
	err := d.sendOnce(ctx, topic, items)
	d.noteCall(err)
	if err != nil && (isQueueMissing(err) || isTopicMissing(err)) && ctx.Err() == nil {
		d.api.forget(topic)
		for _, it := range items {
			it.err = nil
		}
		err = d.sendOnce(ctx, topic, items)
		d.noteCall(err)
	}
	if err != nil {
		err = fmt.Errorf("relay/sqs: sending to %s %q: %w", d.noun(), topic, err)
		if isTransient(err) && ctx.Err() == nil {
			d.log.Debug("relay/sqs: send failed; the publisher sends it again", "topic", topic, "err", err)
			err = driver.Retryable(err)
		}
		for _, it := range items {
			it.err = err
		}
		return
	}
	if isFIFO(topic) {
		return // resending some entries of a FIFO batch would reorder their group
	}
	for _, it := range items {
		var ee *EntryError
		if errors.As(it.err, &ee) && !isPermanentCode(ee.Code, ee.SenderFault) {
			it.err = driver.Retryable(it.err)
		}
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
	dest, err := d.api.dest(ctx, topic)
	if err != nil {
		return err
	}
	fifo := isFIFO(topic)
	if !d.noBatch.Load() {
		err := d.batchCall(ctx, dest, items, fifo)
		if err == nil || !isUnsupported(err) {
			return err
		}
		d.noBatch.Store(true)
		d.log.Info(d.api.noBatch, d.api.logKey, topic)
	}
	return d.singleCalls(ctx, dest, items, fifo)
}

// entry is one message as a publish call carries it: id is its index in
// the batch call; group and dedup (MessageGroupId and
// MessageDeduplicationId) are set on FIFO topics only.
type entry struct {
	id           string
	body         string
	attrs        map[string]string
	group, dedup *string
	delay        int32 // DelaySeconds (SQS only; SNS has none)
}

func newEntry(i int, it *outgoing, fifo bool) entry {
	e := entry{id: strconv.Itoa(i), body: it.e.body, attrs: it.e.attrs, delay: it.delay}
	if fifo {
		e.group = aws.String(fifoID(it.m.Key))
		e.dedup = aws.String(fifoID(it.m.ID))
	}
	return e
}

// failFunc records an entry that a batch call lists as Failed.
type failFunc func(id, code, message *string, senderFault bool)

// publishAPI is what publishing to SQS and to SNS does differently: the
// service calls and their types. The flow around them (sendBatchOrSingles,
// batchCall, singleCalls) is shared.
type publishAPI struct {
	noBatch string // logged when the service turns out to lack the batch call
	logKey  string // the log attribute that names the queue or topic
	// dest returns where topic's messages go: the queue URL or topic ARN.
	dest func(ctx context.Context, topic string) (string, error)
	// forget makes the next dest of topic look it up (or create it) again.
	forget func(topic string)
	// batch makes one batch call to dest and calls fail for each entry the
	// service lists as Failed. An error fails the call as a whole.
	batch func(ctx context.Context, dest string, entries []entry, fail failFunc) error
	// single makes one single-message call to dest.
	single func(ctx context.Context, dest string, e entry) error
	// missing tells whether err says the queue or topic does not exist.
	missing func(err error) bool
}

func sqsPublishAPI(c *clients, topo *topology) publishAPI {
	return publishAPI{
		noBatch: "relay/sqs: the service has no SendMessageBatch; sending one message per call",
		logKey:  "queue",
		dest:    topo.queueURL,
		forget:  topo.forgetQueue,
		batch: func(ctx context.Context, url string, entries []entry, fail failFunc) error {
			in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: make([]sqstypes.SendMessageBatchRequestEntry, len(entries))}
			for i, e := range entries {
				in.Entries[i] = sqstypes.SendMessageBatchRequestEntry{Id: aws.String(e.id), MessageBody: aws.String(e.body),
					MessageAttributes: sqsAttrs(e.attrs), MessageGroupId: e.group, MessageDeduplicationId: e.dedup, DelaySeconds: e.delay}
			}
			out, err := c.sqs.SendMessageBatch(ctx, in)
			if err != nil {
				return err
			}
			for _, f := range out.Failed {
				fail(f.Id, f.Code, f.Message, f.SenderFault)
			}
			return nil
		},
		single: func(ctx context.Context, url string, e entry) error {
			_, err := c.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(e.body),
				MessageAttributes: sqsAttrs(e.attrs), MessageGroupId: e.group, MessageDeduplicationId: e.dedup, DelaySeconds: e.delay})
			return err
		},
		missing: isQueueMissing,
	}
}

func snsPublishAPI(c *clients, topo *topology) publishAPI {
	return publishAPI{
		noBatch: "relay/sqs: the service has no PublishBatch; publishing one message per call",
		logKey:  "topic",
		dest:    topo.topicArn,
		forget:  topo.forgetTopic,
		batch: func(ctx context.Context, arn string, entries []entry, fail failFunc) error {
			in := &sns.PublishBatchInput{TopicArn: aws.String(arn), PublishBatchRequestEntries: make([]snstypes.PublishBatchRequestEntry, len(entries))}
			for i, e := range entries {
				in.PublishBatchRequestEntries[i] = snstypes.PublishBatchRequestEntry{Id: aws.String(e.id), Message: aws.String(e.body),
					MessageAttributes: snsAttrs(e.attrs), MessageGroupId: e.group, MessageDeduplicationId: e.dedup}
			}
			out, err := c.sns.PublishBatch(ctx, in)
			if err != nil {
				return err
			}
			for _, f := range out.Failed {
				fail(f.Id, f.Code, f.Message, f.SenderFault)
			}
			return nil
		},
		single: func(ctx context.Context, arn string, e entry) error {
			_, err := c.sns.Publish(ctx, &sns.PublishInput{TopicArn: aws.String(arn), Message: aws.String(e.body),
				MessageAttributes: snsAttrs(e.attrs), MessageGroupId: e.group, MessageDeduplicationId: e.dedup})
			return err
		},
		missing: isTopicMissing,
	}
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

// batchCall sends items in one batch call to dest. An entry not listed as
// failed was accepted: the call succeeded, and Failed names the
// exceptions, each by its Id, the item's index, and gets an EntryError.
// (goaws reports its successes under another JSON key, so Successful
// cannot be relied on.)
func (d *pubDriver) batchCall(ctx context.Context, dest string, items []*outgoing, fifo bool) error {
	entries := make([]entry, len(items))
	for i, it := range items {
		entries[i] = newEntry(i, it, fifo)
	}
	return d.api.batch(ctx, dest, entries, func(id, code, message *string, senderFault bool) {
		if i, err := strconv.Atoi(aws.ToString(id)); err == nil && i >= 0 && i < len(items) {
			items[i].err = &EntryError{Code: aws.ToString(code), Message: aws.ToString(message), SenderFault: senderFault}
		}
	})
}

// singleCalls sends items one call each, for a service without the batch
// call. A failure of the first call that the service did not answer
// (nothing sent yet), or a missing queue or topic, fails the call as a
// whole; other failures are set on their items.
func (d *pubDriver) singleCalls(ctx context.Context, dest string, items []*outgoing, fifo bool) error {
	for i, it := range items {
		if err := d.api.single(ctx, dest, newEntry(i, it, fifo)); err != nil {
			if i == 0 && apiCode(err) == "" || d.api.missing(err) {
				return err // nothing sent yet, or the queue or topic is gone: a whole-call failure
			}
			it.err = err
		}
	}
	return nil
}
