package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// NewPublisher connects a publisher. ctx bounds connecting only: the seed
// brokers must answer a metadata request within it. The publisher is safe
// for concurrent use; see relay.Publisher for Publish and Close. It also
// implements relay.CapabilityReporter and relay.HealthChecker.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (relay.Publisher, error) {
	cfg.defaults()
	if err := join(append(cfg.problems(), cfg.plainProblems()...)); err != nil {
		return nil, fmt.Errorf("%w: %w", relay.ErrBadURL, err)
	}
	opts, err := cfg.clientOpts()
	if err != nil {
		return nil, err
	}
	h := newHealth()
	opts = append(opts, kgo.WithHooks(h))
	cl, err := kgo.NewClient(append(opts, cfg.producerOpts()...)...)
	if err != nil {
		return nil, fmt.Errorf("relay/kafka: %w", err)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("relay/kafka: connecting to %v: %w", cfg.Brokers, err)
	}
	d := &pubDriver{
		cl:     cl,
		topics: newTopicMaker(kadm.NewClient(cl), &cfg.Config),
		caps:   capabilities(cfg.MaxMessageBytes),
		create: !cfg.NoCreateTopics,
		health: h,
	}
	return driver.NewPublisher(d, 0), nil
}

func capabilities(maxBytes int) relay.Capabilities {
	return relay.Capabilities{
		Backend:              "kafka",
		Durable:              true,
		CrossProcess:         true,
		Ordering:             relay.OrderPerKey,
		NativeDelay:          false,
		DelayedDelivery:      relay.DelayEmulated,
		NativeDeadLetter:     false,
		AttemptFromBroker:    false,
		Replay:               true,
		MaxMessageBytes:      maxBytes,
		MaxMessageBytesSetBy: "max_bytes= (the broker's message.max.bytes and the topic's max.message.bytes must allow as much)",
		RetainedBeforeGroup:  "kept: a new group starts at the oldest retained record (start=earliest, the default); with start=latest, only from Provision or the first Subscribe on",

		AckedAfterUnsettledRedelivered: true,
	}
}

type pubDriver struct {
	cl     *kgo.Client
	topics *topicMaker
	caps   relay.Capabilities
	create bool
	health *health
}

// Health implements relay.HealthChecker: nil while some broker answers.
func (d *pubDriver) Health() error { return d.health.err() }

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

// CheckGroups implements driver.GroupCheckDriver: always nil, because
// a new group starts at the oldest retained record (start=earliest, the
// default), so a message published before any group exists is kept for
// one created later, within the topic's retention.
func (d *pubDriver) CheckGroups(context.Context, string) error { return nil }

func (d *pubDriver) ValidateTopic(topic string) error { return validateTopic(topic) }

// ValidateMessage checks the kafka.tombstone entry and the record size as
// the broker counts it.
func (d *pubDriver) ValidateMessage(_ string, m *relay.Message) error {
	if err := validateTombstone(m); err != nil {
		return err
	}
	return driver.SizeError(m, recordSize(m), d.caps)
}

// batchWait collects the outcome of one batch's records. Its onDone runs
// once: when the last record's promise ran, or when ctx ended first (the
// records not confirmed by then are reported as of unknown outcome; their
// late promises change nothing). It owns the batch's records, so that one
// promise (the method value of promise) serves all of them: a record is
// found by its place in recs, not by a closure per record.
//
// Promises take no lock: each writes only its own record's outcome and
// then marks it done, and the one that brings pending to zero ends the
// batch. The end reads an outcome's error only after seeing it done.
type batchWait struct {
	ctx      context.Context
	msgs     []*relay.Message
	recs     []kgo.Record // recs[i] is msgs[i]'s record
	outcomes []outcome    // outcomes[i] is recs[i]'s promise
	onDone   func(error)
	pending  atomic.Int64
	ended    atomic.Bool
	stop     atomic.Pointer[func() bool] // unregisters the ctx watch; nil until newBatchWait stored it
}

// outcome is what one record's promise reported.
type outcome struct {
	err  error // written by the promise before done
	done atomic.Bool
}

func newBatchWait(ctx context.Context, msgs []*relay.Message, onDone func(error)) *batchWait {
	b := &batchWait{ctx: ctx, msgs: msgs, recs: make([]kgo.Record, len(msgs)), outcomes: make([]outcome, len(msgs)), onDone: onDone}
	b.pending.Store(int64(len(msgs)))
	// The watch can fire (ctx already ended) before AfterFunc returns, so
	// end may miss the stop function: then it is called here.
	stop := context.AfterFunc(ctx, b.end)
	b.stop.Store(&stop)
	if b.ended.Load() {
		stop()
	}
	return b
}

// promise is the produce promise of every record of b.recs.
func (b *batchWait) promise(r *kgo.Record, err error) { b.finish(b.index(r), err) }

// index is the place of r in b.recs (r is one of them: franz-go hands a
// promise the record it was given).
func (b *batchWait) index(r *kgo.Record) int {
	return int((uintptr(unsafe.Pointer(r)) - uintptr(unsafe.Pointer(unsafe.SliceData(b.recs)))) / unsafe.Sizeof(kgo.Record{}))
}

// finish records the promise of record i; the last one ends the batch.
func (b *batchWait) finish(i int, err error) {
	o := &b.outcomes[i]
	o.err = err
	o.done.Store(true)
	if b.pending.Add(-1) == 0 {
		b.end()
	}
}

// end reports the outcome once.
func (b *batchWait) end() {
	if !b.ended.CompareAndSwap(false, true) {
		return
	}
	err := b.result()
	if stop := b.stop.Load(); stop != nil {
		(*stop)()
	}
	b.onDone(err)
}

// result is the batch's outcome as SendBatch reports it: nil, the plain
// error when every message failed alike, else a *relay.PublishError
// naming the failed ones. Called once, by end.
func (b *batchWait) result() error {
	var failed []relay.MessageFailure
	for i, m := range b.msgs {
		var err error
		if o := &b.outcomes[i]; o.done.Load() {
			err = o.err
		} else {
			err = fmt.Errorf("relay/kafka: delivery not confirmed before the context ended (it may still arrive): %w", b.ctx.Err())
		}
		if err == nil {
			continue
		}
		failed = append(failed, relay.MessageFailure{ID: m.ID, Err: mapProduceError(m, err)})
	}
	return driver.SendError(len(b.msgs), failed, nil)
}

// SendBatch produces every message asynchronously and waits until each is
// acknowledged as configured (acks), or ctx ends. Messages not confirmed
// are named in a *relay.PublishError; when none was confirmed and all
// failed alike, the plain error is returned.
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	out := make(chan error, 1)
	d.SendBatchAsync(ctx, topic, msgs, func(err error) { out <- err })
	return <-out
}

// SendBatchAsync implements driver.AsyncSender: the records go to the
// client's producer (which keeps them in order per partition, idempotent)
// and done runs from the last record's promise, or when ctx ends first.
// A message with a DeliverAt in the future goes to its delay bucket topic
// instead (see DelayTopics), created first when new.
// The topic is created first when it is new (a blocking admin call, once
// per topic).
func (d *pubDriver) SendBatchAsync(ctx context.Context, topic string, msgs []*relay.Message, done func(error)) {
	if len(msgs) == 0 {
		done(nil)
		return
	}
	if d.create {
		if err := d.topics.ensure(ctx, topic); err != nil {
			done(err)
			return
		}
	}
	var now time.Time // read once, only when some message carries a DeliverAt
	for _, m := range msgs {
		if !m.DeliverAt.IsZero() {
			now = time.Now()
			break
		}
	}
	if !now.IsZero() && d.create {
		for _, m := range msgs {
			if left, ok := driver.Delay(m, now); ok {
				if err := d.topics.ensure(ctx, bucketTopic(topic, left)); err != nil {
					done(err)
					return
				}
			}
		}
	}
	b := newBatchWait(ctx, msgs, done)
	// One allocation for the batch's records (in b) and one for their
	// headers, and one promise for all of them.
	recs, promise := b.recs, b.promise
	nh := 0
	for _, m := range msgs {
		nh += 1 + len(m.Metadata)
	}
	hdrs := make([]kgo.RecordHeader, nh)
	for i, m := range msgs {
		k := 1 + len(m.Metadata)
		if left, ok := driver.Delay(m, now); ok {
			encodeDelayed(&recs[i], hdrs[:0:k], topic, m, left)
		} else {
			encodeInto(&recs[i], hdrs[:0:k], topic, m)
		}
		hdrs = hdrs[k:]
		d.cl.Produce(ctx, &recs[i], promise)
	}
}

func mapProduceError(m *relay.Message, err error) error {
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return &relay.LimitError{MessageID: m.ID, What: "message size",
			Detail: "rejected by the broker, whose message.max.bytes or the topic's max.message.bytes is below relay's max_bytes=: " + err.Error()}
	case errors.Is(err, kgo.ErrClientClosed):
		return fmt.Errorf("relay/kafka: %w: %w", relay.ErrClosed, err)
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("relay/kafka: topic does not exist (create_topics=false?): %w", err)
	}
	return fmt.Errorf("relay/kafka: produce: %w", err)
}

func (d *pubDriver) Close() error {
	d.cl.Close()
	return nil
}
