package amqp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Publisher is a relay.Publisher for RabbitMQ. It is safe for concurrent
// use; see Config for its options and NewPublisher for its behaviour.
type Publisher struct {
	sharedPublisher
	d *pubDriver
}

// sharedPublisher is the part of the shared layer's publisher that
// Publisher offers: relay's interfaces, not the driver's internals.
type sharedPublisher interface {
	relay.Publisher
	relay.AsyncPublisher
	relay.CapabilityReporter
	relay.HealthChecker
	relay.GroupChecker
	relay.GroupPublisher
}

// State reports the connection state.
func (p *Publisher) State() State { return p.d.sup.State() }

// NewPublisher connects to cfg.URL (bounded by ctx and cfg.ConnectTimeout)
// and returns a publisher.
//
// Publish declares the topic's durable exchange (once per connection),
// publishes every message of the call pipelined on a pooled channel in
// confirm mode, persistent and mandatory, and returns when the broker
// confirmed them all. A message returned as unroutable fails with
// ErrUnroutable; a broker nack with ErrNacked; such failures are reported
// as a *relay.PublishError naming the messages. When the connection drops,
// Publish waits for the reconnect (within ctx) and the shared layer
// publishes the unconfirmed messages again, so a message may reach the
// broker twice (at-least-once).
func NewPublisher(ctx context.Context, cfg Config) (*Publisher, error) {
	if err := cfg.validate(rolePublisher); err != nil {
		return nil, err
	}
	sup, err := connect(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	d := &pubDriver{
		cfg:      cfg,
		sup:      sup,
		names:    names{exchangePrefix: cfg.ExchangePrefix, queuePrefix: cfg.QueuePrefix},
		caps:     capabilities(&cfg),
		slots:    make([]*pubSlot, cfg.PublishChannels),
		declared: map[string]uint64{},
	}
	for i := range d.slots {
		d.slots[i] = &pubSlot{lock: make(chan struct{}, 1)}
	}
	return &Publisher{sharedPublisher: driver.NewPublisher(d, 0), d: d}, nil
}

func capabilities(cfg *Config) relay.Capabilities {
	c := relay.Capabilities{
		Backend:              "amqp",
		Durable:              true,
		CrossProcess:         true,
		Ordering:             relay.OrderPerTopic,
		PublishToGroup:       true,
		NativeDelay:          cfg.NativeDelay && cfg.RequeueOnNack,
		NativeDeadLetter:     true,
		AttemptFromBroker:    cfg.QueueType == QueueQuorum,
		MaxMessageBytes:      cfg.MaxBytes,
		MaxMessageBytesSetBy: "max_bytes= (at most 128 MiB, RabbitMQ's default max_message_size)",
		RetainedBeforeGroup:  "not kept: with mandatory (default) Publish fails with ErrUnroutable while no group queue is bound; Provision declares a group ahead",
	}
	if c.NativeDelay {
		c.MaxDelay = MaxDelay
	}
	// Due queues: the broker holds the message (see topology.go).
	c.DelayedDelivery = relay.DelayNative
	c.MaxDeliverDelay = MaxDelay
	return c
}

type pubDriver struct {
	cfg   Config
	sup   *supervisor
	names names
	caps  relay.Capabilities

	next  atomic.Uint64 // round-robin over chans
	slots []*pubSlot

	mu       sync.Mutex
	declared map[string]uint64 // exchange → connection generation it was declared on

	bg sync.WaitGroup // background channel closes
}

// pubSlot holds one channel of the pool, replaced when it closes or its
// connection is gone.
type pubSlot struct {
	lock chan struct{} // a mutex that can be waited for within a ctx
	pc   *pubChan
}

// channel returns a usable pooled channel, opening one if needed; it waits
// for the connection within ctx. Channels are shared by concurrent calls.
func (d *pubDriver) channel(ctx context.Context) (*pubChan, error) {
	slot := d.slots[d.next.Add(1)%uint64(len(d.slots))]
	select {
	case slot.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-slot.lock }()
	if slot.pc != nil && slot.pc.usable(d.sup.current()) {
		return slot.pc, nil
	}
	if slot.pc != nil {
		d.discard(slot.pc)
		slot.pc = nil
	}
	pc, err := openPubChan(ctx, d.sup, d.cfg.Confirm, d.cfg.Mandatory)
	if err != nil {
		return nil, err
	}
	slot.pc = pc
	return pc, nil
}

// discard closes pc in the background; its dispatcher completes what is
// still unconfirmed on it as lost.
func (d *pubDriver) discard(pc *pubChan) {
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		_ = pc.ch.Close()
		<-pc.done
	}()
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

func (d *pubDriver) ValidateTopic(topic string) error {
	if isReplyAddress(topic) {
		if len(topic) > shortstrMax {
			return fmt.Errorf("relay/amqp: direct reply-to address of %d bytes is over %d: %w", len(topic), shortstrMax, relay.ErrInvalidTopic)
		}
		return nil
	}
	return d.names.validatePublish(topic)
}

func (d *pubDriver) ValidateMessage(topic string, m *relay.Message) error {
	if err := validateMessage(m); err != nil {
		return err
	}
	if !m.DeliverAt.IsZero() {
		if err := checkName("due queue", d.names.exchange(topic), maxDueSuffix); err != nil {
			return err
		}
	}
	limit := headerLimit(int(d.sup.frameMax.Load()))
	if n := messageHeaderSize(m); n > limit {
		return &relay.LimitError{MessageID: m.ID, What: "metadata size", Limit: limit, Actual: n,
			Detail: fmt.Sprintf("ID and metadata encode to %d bytes; an AMQP content header must fit the connection's frame_max (%d bytes of payload)", n, limit)}
	}
	return nil
}

// ensureExchange declares ex on pc's connection unless it was declared on
// it already, within ctx (see bounded).
func (d *pubDriver) ensureExchange(ctx context.Context, pc *pubChan, ex string) error {
	d.mu.Lock()
	g, ok := d.declared[ex]
	d.mu.Unlock()
	if ok && g == pc.gen {
		return nil
	}
	err := d.sup.rpc(ctx, pc.conn, func() error {
		pc.lock() // one RPC at a time on a shared channel
		defer pc.unlock()
		return declareExchange(pc.ch, ex, d.cfg.ExchangeKind)
	})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.declared[ex] = pc.gen
	d.mu.Unlock()
	return nil
}

// forgetExchange makes the next publish to ex declare it again, with its
// due exchange and queues.
func (d *pubDriver) forgetExchange(ex string) {
	d.mu.Lock()
	delete(d.declared, ex)
	prefix := dueKey(ex, "")
	for k := range d.declared {
		if strings.HasPrefix(k, prefix) {
			delete(d.declared, k)
		}
	}
	d.mu.Unlock()
}

// dueKey is the key of due queue q of exchange ex in declared.
func dueKey(ex, q string) string { return ex + "\x00due\x00" + q }

// SendBatch implements driver.PublishDriver. Messages due later
// (Message.DeliverAt) go to the topic's due exchange, the others to the
// topic's exchange; see sendTo.
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	return d.sendBatch(ctx, topic, msgs, d.channel, "")
}

// sendBatch publishes msgs to topic on the channels that channel returns,
// with the reply_to property set to replyTo when it is not "". A topic that
// is a direct reply-to address goes to the default exchange with the
// address as routing key, at once (a reply is never delayed); a reply that
// is unroutable there (its requester is gone) counts as delivered: the
// broker drops it, as it would had the requester closed a moment later.
func (d *pubDriver) sendBatch(ctx context.Context, topic string, msgs []*relay.Message, channel func(context.Context) (*pubChan, error), replyTo string) error {
	ex := d.names.exchange(topic)
	plan := sendPlan{topic: topic, ex: ex, channel: channel, replyTo: replyTo, enc: encode}
	if isReplyAddress(topic) {
		plan.ex, plan.reply = "", true
		return d.result(msgs, d.sendTo(ctx, plan, msgs))
	}
	buckets := d.dueBuckets(msgs)
	if buckets == nil {
		return d.result(msgs, d.sendTo(ctx, plan, msgs))
	}
	var immediate, delayed []*relay.Message
	need := map[uint64]bool{}
	for _, m := range msgs {
		if k, ok := buckets[m]; ok {
			delayed = append(delayed, m)
			need[k] = true
		} else {
			immediate = append(immediate, m)
		}
	}
	var failed []relay.MessageFailure
	if len(immediate) > 0 {
		failed = d.sendTo(ctx, plan, immediate)
	}
	ensure := func(ctx context.Context, pc *pubChan) error {
		for k := range need {
			if err := d.ensureDue(ctx, pc, ex, k); err != nil {
				return err
			}
		}
		return nil
	}
	// A due queue expires messages only at its head, in the order they
	// entered it: sent in due order, a call's messages of one bucket fall
	// due in due order (messages of separate calls still queue in the
	// order they were published; see TestDueOrderWithinBucket).
	slices.SortStableFunc(delayed, func(a, b *relay.Message) int { return a.DeliverAt.Compare(b.DeliverAt) })
	plan.ex, plan.ensure = dueExchange(ex), ensure
	plan.enc = func(m *relay.Message) amqp091.Publishing { return encodeDue(m, buckets[m]) }
	failed = append(failed, d.sendTo(ctx, plan, delayed)...)
	return d.result(msgs, failed)
}

// dueBuckets returns the due bucket of each message of msgs due later,
// nil when there is none.
func (d *pubDriver) dueBuckets(msgs []*relay.Message) map[*relay.Message]uint64 {
	var now time.Time
	var buckets map[*relay.Message]uint64
	for _, m := range msgs {
		if m.DeliverAt.IsZero() {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		if delay, ok := driver.Delay(m, now); ok {
			if buckets == nil {
				buckets = map[*relay.Message]uint64{}
			}
			buckets[m] = dueBucket(delay)
		}
	}
	return buckets
}

// encodeDue encodes m for its due queue: routed there by headerDue, and
// expiring when it is due. The expiration counts from now, rounded up to
// the millisecond, and is taken again at each attempt (a retry later
// waits less, so the message still falls due at DeliverAt).
func encodeDue(m *relay.Message, bucket uint64) amqp091.Publishing {
	p := encode(m)
	if p.Headers == nil {
		p.Headers = amqp091.Table{}
	}
	p.Headers[headerDue] = bucketLabel(bucket)
	wait := max(0, time.Until(m.DeliverAt))
	p.Expiration = strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10)
	return p
}

// ensureDue declares the due exchange of ex and its due queue of bucket k
// on pc's connection unless it was declared on it already.
func (d *pubDriver) ensureDue(ctx context.Context, pc *pubChan, ex string, bucket uint64) error {
	key := dueKey(ex, dueQueue(ex, bucket))
	d.mu.Lock()
	g, ok := d.declared[key]
	d.mu.Unlock()
	if ok && g == pc.gen {
		return nil
	}
	err := d.sup.rpc(ctx, pc.conn, func() error {
		pc.lock()
		defer pc.unlock()
		return declareDue(pc.ch, ex, bucket)
	})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.declared[key] = pc.gen
	d.mu.Unlock()
	return nil
}

// sendPlan is where and how sendTo publishes.
type sendPlan struct {
	topic   string
	ex      string                                  // the exchange published to
	channel func(context.Context) (*pubChan, error) // the channels to publish on
	replyTo string                                  // the reply_to property, when not ""
	reply   bool                                    // topic is a direct reply-to address
	queue   string                                  // with ex "": the one queue published to, as routing key
	ensure  func(context.Context, *pubChan) error   // declares what ex needs beyond the topic's exchange
	enc     func(*relay.Message) amqp091.Publishing // the encoding
}

// sendTo makes one attempt to publish msgs to exchange ex, which
// ensureExchange declares (and ensure, when given, whatever else they
// need), and returns the messages that failed. Failures that another
// attempt may fix are marked driver.Retryable, and the shared layer sends
// those messages again with its backoff: a connection or channel that
// could not be had (the supervisor reconnects meanwhile), a channel that
// went away before the broker confirmed (its messages count as lost, not
// refused), a transient refusal of a declaration. Refusals that would
// meet every attempt (access, preconditions) are final.
func (d *pubDriver) sendTo(ctx context.Context, plan sendPlan, msgs []*relay.Message) []relay.MessageFailure {
	topic, ex := plan.topic, plan.ex
	var failed []relay.MessageFailure
	fail := func(ms []*relay.Message, err error) []relay.MessageFailure {
		for _, m := range ms {
			failed = append(failed, relay.MessageFailure{ID: m.ID, Err: err})
		}
		return failed
	}
	// final reports whether err ends the attempt for good: the publisher
	// closed, the broker refused for a reason a retry would meet again, or
	// err is ctx's own. Anything else is marked Retryable even when ctx
	// has ended meanwhile: the shared publisher then reports it as
	// "<ctx error> (last error: err)", wrapping both.
	final := func(err error) bool {
		return errors.Is(err, relay.ErrClosed) || isPermanent(err) ||
			(ctx.Err() != nil && errors.Is(err, ctx.Err()))
	}
	pc, err := plan.channel(ctx)
	if err == nil && !plan.reply {
		err = d.ensureExchange(ctx, pc, d.names.exchange(topic))
	}
	if err == nil && plan.ensure != nil {
		err = plan.ensure(ctx, pc)
	}
	if err != nil {
		if final(err) {
			return fail(msgs, err)
		}
		if isNotFound(err) {
			d.forgetExchange(d.names.exchange(topic))
		}
		return fail(msgs, driver.Retryable(err))
	}
	res := pc.send(ctx, ex, len(msgs), func(i int) (string, amqp091.Publishing) {
		p := plan.enc(msgs[i])
		if plan.replyTo != "" {
			p.ReplyTo = plan.replyTo
		}
		switch {
		case plan.reply:
			return topic, p
		case plan.queue != "":
			return plan.queue, p
		}
		return msgs[i].Key, p
	})
	var lost []*relay.Message
	var notConfirmed error
	for i, m := range msgs {
		switch res.status[i] {
		case stOK:
		case stUnroutable:
			if plan.reply {
				continue
			}
			r := res.returns[i]
			failed = append(failed, relay.MessageFailure{ID: m.ID, Err: &UnroutableError{
				MessageID: m.ID, Topic: topic, Exchange: r.Exchange, RoutingKey: r.RoutingKey, ReplyCode: r.ReplyCode, ReplyText: r.ReplyText}})
			if plan.ensure != nil {
				// A due queue went away (deleted by hand): declare the
				// due topology again on the next publish.
				d.forgetExchange(d.names.exchange(topic))
			}
		case stNacked:
			failed = append(failed, relay.MessageFailure{ID: m.ID, Err: ErrNacked})
		case stPending:
			if notConfirmed == nil {
				notConfirmed = res.waitErr
				if notConfirmed == nil {
					notConfirmed = fmt.Errorf("relay/amqp: not confirmed: %w", ctxErr(ctx))
				}
			}
			failed = append(failed, relay.MessageFailure{ID: m.ID, Err: notConfirmed})
		default: // stLost: the channel or connection went away
			lost = append(lost, m)
		}
	}
	if len(lost) == 0 {
		return failed
	}
	why := fmt.Errorf("relay/amqp: publishing to exchange %q: %w", ex, res.chanErr)
	if isNotFound(res.chanErr) {
		// The exchange was deleted under us: the next attempt declares it
		// again. A direct reply-to address has nothing to declare.
		d.forgetExchange(d.names.exchange(topic))
		if plan.reply {
			return fail(lost, why)
		}
	}
	if final(res.chanErr) {
		return fail(lost, why)
	}
	return fail(lost, driver.Retryable(why))
}

// result turns failures into Publish's error (driver.SendError):
// unroutable and nacked messages are named one by one even when all of
// them failed so.
func (d *pubDriver) result(msgs []*relay.Message, failed []relay.MessageFailure) error {
	return driver.SendError(len(msgs), failed, aboutTheMessage)
}

func aboutTheMessage(err error) bool {
	return errors.Is(err, ErrUnroutable) || errors.Is(err, ErrNacked)
}

// ctxErr is ctx's error, or DeadlineExceeded for a ctx not yet marked done.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// Close implements driver.PublishDriver.
func (d *pubDriver) Close() error {
	err := d.sup.close(5 * time.Second) // closes every channel
	for _, slot := range d.slots {
		slot.lock <- struct{}{}
		if slot.pc != nil {
			<-slot.pc.done
		}
		<-slot.lock
	}
	d.bg.Wait()
	return err
}

// Health implements relay.HealthChecker: nil while connected.
func (d *pubDriver) Health() error { return d.sup.health() }
