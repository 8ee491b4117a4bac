package amqp

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
)

// Topology
//
//	topic T        → exchange <exchange_prefix>T, durable, of exchange_kind
//	group G of T   → queue <queue_prefix>T.G, durable (classic or quorum),
//	                 bound to the exchange with each binding key
//	NackAfter(d)   → queue <queue>.relay-delay-<2^k>ms (durable, classic), for
//	                 the smallest 2^k ≥ d in milliseconds; the copy waits with
//	                 per-message expiration = d, then is dead-lettered through
//	                 the default exchange back to <queue>
//	DeliverAt        → exchange <exchange>.relay-due (durable, headers) and
//	                 queue <exchange>.relay-due-<b>ms (durable, classic)
//	                 bound to it on header relay-due = "<b>ms", for the
//	                 smallest bound b = ceil(2^(j/4)) ≥ the delay in
//	                 milliseconds (see dueBucket); the message
//	                 waits with per-message expiration = its delay, then is
//	                 dead-lettered to <exchange> with its own routing key,
//	                 so that every group's queue gets it when due
//
// Publishers declare the exchange, and the due exchange and due queues
// when first used (once per connection each); subscribers declare the
// exchange, the queue and its bindings (Subscribe, Provision, every
// reconnect), and delay queues when first used. Nothing deletes delay or
// due queues: once empty they cost the broker a queue each.

// names derives broker names from topics.
type names struct {
	exchangePrefix, queuePrefix, group string
}

func (n names) exchange(topic string) string { return n.exchangePrefix + topic }
func (n names) queue(topic string) string    { return n.queuePrefix + topic + "." + n.group }

const delayInfix = ".relay-delay-"

// maxDelayExp bounds delay buckets: 2^31 ms ≈ 24.8 days.
const maxDelayExp = 31

// MaxDelay is the longest NackAfter delay done by the broker; longer delays
// are held in the process.
const MaxDelay = time.Duration(1<<maxDelayExp) * time.Millisecond

// delayBucket returns the exponent k of the smallest 2^k ms ≥ d.
func delayBucket(d time.Duration) int {
	ms := uint64((d + time.Millisecond - 1) / time.Millisecond)
	if ms <= 1 {
		return 0
	}
	return bits.Len64(ms - 1)
}

func delayQueue(queue string, k int) string { return bucketName(queue, delayInfix, 1<<uint(k)) }

// bucketName names the queue of base for the delay bucket whose delays
// are at most ms milliseconds.
func bucketName(base, infix string, ms uint64) string { return base + infix + bucketLabel(ms) }

// bucketLabel is "<ms>ms".
func bucketLabel(ms uint64) string { return strconv.FormatUint(ms, 10) + "ms" }

// isDelayQueueOf returns a predicate telling the delay queues of queue.
func isDelayQueueOf(queue string) func(string) bool { return isBucketOf(queue, delayInfix) }

// isBucketOf returns a predicate telling the bucket queues of base with
// infix (see bucketName).
func isBucketOf(base, infix string) func(string) bool {
	prefix := base + infix
	return func(q string) bool {
		if !strings.HasPrefix(q, prefix) || !strings.HasSuffix(q, "ms") {
			return false
		}
		_, err := strconv.ParseUint(q[len(prefix):len(q)-2], 10, 64)
		return err == nil
	}
}

// longest delay queue suffix, for name length checks
var maxDelaySuffix = len(delayInfix) + len(strconv.FormatUint(1<<maxDelayExp, 10)) + len("ms")

// Delayed delivery (Message.DeliverAt) goes through the topic's due
// exchange into its due queues.
const (
	dueInfix = ".relay-due-"
	// headerDue is the header the due exchange routes on. It is not
	// x-relay-*: a headers exchange ignores names starting with x-.
	headerDue = "relay-due"
)

func dueExchange(exchange string) string             { return exchange + ".relay-due" }
func dueQueue(exchange string, ms uint64) string     { return bucketName(exchange, dueInfix, ms) }
func isDueQueueOf(exchange string) func(string) bool { return isBucketOf(exchange, dueInfix) }

var maxDueSuffix = len(dueInfix) + len(strconv.FormatUint(1<<maxDelayExp, 10)) + len("ms")

// DueTopology returns the names of the due exchange and of every due
// queue that delayed delivery can declare for exchange (a topic's
// exchange, with its prefix): what to delete, with the exchange, when a
// topic is retired. They are declared only when used; deleting one that
// does not exist is harmless in RabbitMQ.
func DueTopology(exchange string) (dueExchangeName string, dueQueues []string) {
	for b := uint64(1); ; {
		dueQueues = append(dueQueues, dueQueue(exchange, b))
		if b >= 1<<maxDelayExp {
			return dueExchange(exchange), dueQueues
		}
		b = dueBucket(time.Duration(b+1) * time.Millisecond)
	}
}

// isRelayQueue returns a predicate telling relay's delay queues of a
// group's queue and due queues of its topic's exchange, whose
// dead-lettering traces relay hides.
func isRelayQueue(queue, exchange string) func(string) bool {
	delay, due := isDelayQueueOf(queue), isDueQueueOf(exchange)
	return func(q string) bool { return delay(q) || due(q) }
}

// dueStepsPerDoubling is how many due buckets span each doubling of the
// delay. RabbitMQ expires messages only at the head of a queue, so a
// message waits behind a longer-delayed one published before it into the
// same bucket, and comes out after it (the order within a bucket is the
// publish order; a Publish call sends its delayed messages in due order):
// with bounds 2^(1/4) apart it is late by less than 19% of its delay (2^k
// buckets, as NackAfter's, would allow up to 100%), at the cost of up to
// four queues per doubling of the delays a topic uses.
const dueStepsPerDoubling = 4

// dueBucket is the due bucket of a delay of d: the smallest bound
// ceil(2^(j/4)) milliseconds, j ≥ 0, that is at least d (rounded up to
// the millisecond), and at most 2^maxDelayExp.
func dueBucket(d time.Duration) uint64 {
	ms := uint64((d + time.Millisecond - 1) / time.Millisecond)
	if ms <= 1 {
		return 1
	}
	j := int(math.Ceil(dueStepsPerDoubling * math.Log2(float64(ms))))
	for {
		b := uint64(math.Ceil(math.Exp2(float64(j) / dueStepsPerDoubling)))
		if b >= ms || b >= 1<<maxDelayExp {
			return min(b, 1<<maxDelayExp)
		}
		j++ // float rounding fell short
	}
}

// declareDue declares the due exchange of exchange and its due queue of
// bucket ms, bound to it on headerDue. It is idempotent.
func declareDue(ch *amqp091.Channel, exchange string, ms uint64) error {
	dx, q := dueExchange(exchange), dueQueue(exchange, ms)
	if err := declareExchange(ch, dx, amqp091.ExchangeHeaders); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp091.Table{"x-dead-letter-exchange": exchange}); err != nil {
		return fmt.Errorf("relay/amqp: declaring due queue %q: %w", q, err)
	}
	if err := ch.QueueBind(q, "", dx, false, amqp091.Table{"x-match": "all", headerDue: bucketLabel(ms)}); err != nil {
		return fmt.Errorf("relay/amqp: binding due queue %q to %q: %w", q, dx, err)
	}
	return nil
}

// checkName checks a broker name derived from a topic (with the prefixes and
// the group): valid UTF-8, no control characters (bytes below 0x20 and
// 0x7f: RabbitMQ takes some of them in a declare and then cannot find the
// name again), at most 255 bytes with extra bytes of suffix, not amq.*.
func checkName(kind, name string, extra int) error {
	switch {
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s name %q is not valid UTF-8", relay.ErrInvalidTopic, kind, name)
	case strings.IndexFunc(name, isControl) >= 0:
		return fmt.Errorf("%w: %s name %q contains a control character (bytes 0x00-0x1f and 0x7f are not allowed in RabbitMQ names)", relay.ErrInvalidTopic, kind, name)
	case len(name)+extra > shortstrMax:
		return fmt.Errorf("%w: %s name %q is too long (%d bytes, at most %d)", relay.ErrInvalidTopic, kind, name, len(name), shortstrMax-extra)
	case strings.HasPrefix(name, "amq."):
		return fmt.Errorf("%w: %s name %q: names starting with amq. are reserved by the broker", relay.ErrInvalidTopic, kind, name)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func (n names) validatePublish(topic string) error {
	return checkName("exchange", n.exchange(topic), 0)
}

func (n names) validateSubscribe(topic string) error {
	if err := n.validatePublish(topic); err != nil {
		return err
	}
	return checkName("queue", n.queue(topic), maxDelaySuffix)
}

// declareExchange declares the durable exchange of a topic.
func declareExchange(ch *amqp091.Channel, name, kind string) error {
	if err := ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
		if isPermanent(err) {
			return fmt.Errorf("relay/amqp: declaring exchange %q as durable %s (does it exist with another kind or durability?): %w", name, kind, err)
		}
		return fmt.Errorf("relay/amqp: declaring exchange %q: %w", name, err)
	}
	return nil
}

// queueArgs are the arguments of a group's queue.
func (d *subDriver) queueArgs() amqp091.Table {
	args := amqp091.Table{}
	if d.cfg.QueueType == QueueQuorum {
		args["x-queue-type"] = QueueQuorum
		if d.cfg.DeliveryLimit > 0 {
			args["x-delivery-limit"] = int64(d.cfg.DeliveryLimit)
		}
	}
	if d.cfg.DeadLetterExchange != "" {
		args["x-dead-letter-exchange"] = d.cfg.DeadLetterExchange
	}
	if d.cfg.SingleActiveConsumer {
		args["x-single-active-consumer"] = true
	}
	if len(args) == 0 {
		return nil
	}
	return args
}

// declareGroup declares the exchange of topic, the group's queue and its
// bindings. It is idempotent. Call ensureDLX first.
func (d *subDriver) declareGroup(ch *amqp091.Channel, topic string) error {
	ex, q := d.names.exchange(topic), d.names.queue(topic)
	if err := declareExchange(ch, ex, d.cfg.ExchangeKind); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, d.queueArgs()); err != nil {
		if isPermanent(err) {
			return fmt.Errorf("relay/amqp: declaring queue %q (does it exist with another queue_type, dead_letter_exchange, delivery_limit or single_active_consumer?): %w", q, err)
		}
		return fmt.Errorf("relay/amqp: declaring queue %q: %w", q, err)
	}
	for _, key := range d.cfg.bindingKeys() {
		if err := ch.QueueBind(q, key, ex, false, nil); err != nil {
			return fmt.Errorf("relay/amqp: binding queue %q to exchange %q with key %q: %w", q, ex, key, err)
		}
	}
	return nil
}

// declareDelayQueue declares the delay queue of bucket k for queue.
func declareDelayQueue(ch *amqp091.Channel, queue string, k int) (string, error) {
	name := delayQueue(queue, k)
	_, err := ch.QueueDeclare(name, true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": queue,
	})
	if err != nil {
		return "", fmt.Errorf("relay/amqp: declaring delay queue %q: %w", name, err)
	}
	return name, nil
}

// ensureDLX makes sure the configured dead-letter exchange exists: an
// existing one is used as it is (any kind), a missing one is declared as a
// durable fanout exchange. Checked once per connection, within ctx (see
// bounded).
func (d *subDriver) ensureDLX(ctx context.Context, conn *amqp091.Connection, gen uint64) error {
	dlx := d.cfg.DeadLetterExchange
	if dlx == "" {
		return nil
	}
	d.mu.Lock()
	done := d.dlxGen == gen
	d.mu.Unlock()
	if done {
		return nil
	}
	ch, err := d.sup.channelOn(ctx, conn)
	if err != nil {
		return err
	}
	err = d.sup.rpc(ctx, conn, func() error {
		return ch.ExchangeDeclarePassive(dlx, KindFanout, true, false, false, false, nil)
	})
	if err == nil {
		d.closeChannel(ch)
	} else {
		if !isNotFound(err) {
			d.closeChannel(ch)
			return fmt.Errorf("relay/amqp: checking dead_letter_exchange %q: %w", dlx, err)
		}
		if ch, err = d.sup.channelOn(ctx, conn); err != nil {
			return err
		}
		err = d.sup.rpc(ctx, conn, func() error { return declareExchange(ch, dlx, KindFanout) })
		d.closeChannel(ch)
		if err != nil {
			return fmt.Errorf("dead_letter_exchange: %w", err)
		}
	}
	d.mu.Lock()
	d.dlxGen = gen
	d.mu.Unlock()
	return nil
}

// RemoveTopic deletes the group's queue of topic with its delay queues,
// and the topic's exchange unless another queue is still bound to it (the
// other groups keep their queues). Idempotent.
func (d *subDriver) RemoveTopic(ctx context.Context, topic string) error {
	if err := d.names.validateSubscribe(topic); err != nil {
		return err
	}
	q, ex := d.names.queue(topic), d.names.exchange(topic)
	ch, conn, _, err := d.sup.openChannel(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	err = d.sup.rpc(ctx, conn, func() error {
		for k := 0; k <= maxDelayExp; k++ {
			if _, err := ch.QueueDelete(delayQueue(q, k), false, false, false); err != nil {
				return fmt.Errorf("relay/amqp: deleting delay queue %q: %w", delayQueue(q, k), err)
			}
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("relay/amqp: deleting queue %q: %w", q, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Fails (closing the channel) while other queues are bound: they keep it.
	_ = d.sup.rpc(ctx, conn, func() error { return ch.ExchangeDelete(ex, true, false) })
	return nil
}
