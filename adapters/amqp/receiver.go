package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// receiver consumes one group's queue of one topic.
type receiver struct {
	d                 *subDriver
	topic, queue      string
	isDelay           func(string) bool
	quorum, republish bool
	log               *slog.Logger

	mu          sync.Mutex
	ch          *amqp091.Channel
	tag         string // consumer tag on ch
	gen         uint64 // increments with every consuming channel
	deliveries  <-chan amqp091.Delivery
	outstanding []uint64 // tags received on ch and not yet settled, ascending
	// delivered: a delivery arrived on the current consuming channel (a
	// waiting single active consumer gets none; see subDriver.Assignment).
	delivered bool
	// window is the subscription's window, every consuming channel's
	// prefetch count (see WindowGrew).
	window int

	// used by Settle only (one goroutine)
	pub        *pubChan
	delayReady map[int]uint64 // delay bucket → connection generation it was declared on
}

// handle is the settlement token of one delivery.
type handle struct {
	gen     uint64
	del     *amqp091.Delivery
	id, key string
	attempt int
}

// setup opens a channel, declares the topology and starts consuming, every
// broker call within ctx (see bounded).
func (r *receiver) setup(ctx context.Context) error {
	sup := r.d.sup
	conn, connGen, err := sup.get(ctx)
	if err != nil {
		return err
	}
	if err := r.d.ensureDLX(ctx, conn, connGen); err != nil {
		return err
	}
	ch, err := sup.channelOn(ctx, conn)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		r.d.closeChannel(ch)
		return err
	}
	if err := sup.rpc(ctx, conn, func() error { return r.d.declareGroup(ch, r.topic) }); err != nil {
		return fail(err)
	}
	r.mu.Lock()
	prefetch := r.window
	r.mu.Unlock()
	if err := sup.rpc(ctx, conn, func() error { return r.d.prefetch(ch, prefetch) }); err != nil {
		return fail(fmt.Errorf("relay/amqp: setting prefetch: %w", err))
	}
	tag := "relay-" + relay.NewID()
	dels, err := bounded(ctx, sup, conn, func() (<-chan amqp091.Delivery, error) {
		return ch.Consume(r.queue, tag, false, false, false, false, nil)
	}, nil)
	if err != nil {
		return fail(fmt.Errorf("relay/amqp: consuming queue %q: %w", r.queue, err))
	}
	r.mu.Lock()
	r.ch = ch
	r.tag = tag
	r.gen++
	r.deliveries = dels
	r.delivered = false
	r.outstanding = r.outstanding[:0]
	r.mu.Unlock()
	return nil
}

// WindowGrew implements driver.WindowFollower: the consuming channel's
// limit (see subDriver.prefetch) follows the grown window, and so does
// the next channel's.
func (r *receiver) WindowGrew(ctx context.Context, window int) error {
	r.mu.Lock()
	r.window = window
	ch := r.ch
	r.mu.Unlock()
	if ch == nil || r.d.noChannelLimit.Load() {
		return nil // the next channel's setup uses it
	}
	conn, _, err := r.d.sup.get(ctx)
	if err != nil {
		return err
	}
	return r.d.sup.rpc(ctx, conn, func() error { return r.d.setChannelLimit(ch, window) })
}

// lost drops the consuming channel of generation gen; its unacked messages
// go back to the queue when it closes.
func (r *receiver) lost(gen uint64) {
	r.mu.Lock()
	if r.gen != gen || r.ch == nil {
		r.mu.Unlock()
		return
	}
	ch := r.ch
	r.ch, r.deliveries, r.outstanding = nil, nil, nil
	r.mu.Unlock()
	r.d.closeChannel(ch)
}

var errConsumerGone = errors.New("relay/amqp: consumer channel closed; subscribing again")

// Receive implements driver.Receiver.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		r.mu.Lock()
		dels, gen := r.deliveries, r.gen
		r.mu.Unlock()
		if dels == nil {
			if err := r.setup(ctx); err != nil {
				return nil, err
			}
			r.log.Info("relay: consuming", "queue", r.queue)
			continue
		}
		var first amqp091.Delivery
		var ok bool
		select {
		case first, ok = <-dels:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !ok {
			r.lost(gen)
			return nil, errConsumerGone
		}
		out := make([]driver.Received, 0, min(max, 16))
		tags := make([]uint64, 0, cap(out))
		add := func(d *amqp091.Delivery) {
			out = append(out, r.received(d, gen))
			tags = append(tags, d.DeliveryTag)
		}
		add(&first)
		r.mu.Lock()
		r.delivered = r.delivered || gen == r.gen
		r.mu.Unlock()
	drain:
		for len(out) < max {
			select {
			case d, ok := <-dels:
				if !ok {
					break drain // noticed on the next call
				}
				add(&d)
			default:
				break drain
			}
		}
		r.mu.Lock()
		if r.gen == gen {
			r.outstanding = append(r.outstanding, tags...)
		}
		r.mu.Unlock()
		return out, nil
	}
}

// received computes Attempt: on quorum queues from x-delivery-count; on
// classic queues from the x-relay-attempt header of relay's republished
// copies (Nack, NackAfter, release) plus one for the redelivered flag (a
// requeue relay did not count: a lost channel or process), and at least
// the attempt this process remembers for a message it requeued itself
// (nack_mode=requeue).
func (r *receiver) received(d *amqp091.Delivery, gen uint64) driver.Received {
	dec := decode(d, r.isDelay)
	attempt := dec.base
	if r.quorum {
		if dec.count > 0 {
			attempt += dec.count
		}
	} else {
		if d.Redelivered {
			attempt = max(attempt+1, r.d.requeued.Recall(r.memoKey(dec.msg.ID)))
		}
	}
	h := &handle{gen: gen, del: d, id: dec.msg.ID, key: dec.msg.Key, attempt: attempt}
	return driver.Received{Msg: dec.msg, Attempt: attempt, Handle: h}
}

// memoKey identifies a message of this queue in subDriver.requeued.
func (r *receiver) memoKey(id string) memoKey { return memoKey{r.queue, id} }

type memoKey struct{ queue, id string }

type settleOp uint8

const (
	opAck settleOp = iota + 1
	opRequeue
	opReject // to the dead-letter exchange
)

type repubItem struct {
	h     *handle
	delay time.Duration // 0: back to the group's queue
}

// Settle implements driver.Receiver. Messages of an older channel are
// skipped: the broker requeued them when that channel closed.
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	r.mu.Lock()
	ch, gen := r.ch, r.gen
	r.mu.Unlock()
	if ch == nil || ch.IsClosed() {
		return nil
	}
	cfg := &r.d.cfg
	ops := make(map[uint64]settleOp, len(batch))
	var repub []repubItem
	for _, s := range batch {
		h := s.Handle.(*handle)
		if h.gen != gen {
			continue
		}
		switch {
		case s.Ack:
			ops[h.del.DeliveryTag] = opAck
		case !cfg.RequeueOnNack:
			ops[h.del.DeliveryTag] = opReject
		case cfg.DeliveryLimit > 0 && h.attempt >= cfg.DeliveryLimit:
			ops[h.del.DeliveryTag] = opReject
		case s.Delay > 0:
			repub = append(repub, repubItem{h: h, delay: s.Delay})
		case r.republish:
			repub = append(repub, repubItem{h: h})
		default:
			ops[h.del.DeliveryTag] = opRequeue
		}
	}
	r.republishOrRequeue(ctx, repub, ops)
	r.remember(batch, gen, ops)
	return r.apply(gen, ops)
}

// republishOrRequeue publishes a copy of each item (see republishCopies)
// and sets ops to ack the originals the broker confirmed a copy of, and to
// requeue the others. A crash between a confirmed copy and the ack of its
// original leaves both in the queue: a duplicate, never a loss.
func (r *receiver) republishOrRequeue(ctx context.Context, repub []repubItem, ops map[uint64]settleOp) {
	if len(repub) == 0 {
		return
	}
	done := r.republishCopies(ctx, repub)
	for i, it := range repub {
		if done[i] {
			ops[it.h.del.DeliveryTag] = opAck
		} else {
			ops[it.h.del.DeliveryTag] = opRequeue // fall back: redeliver now
		}
	}
}

// remember records the next attempt of messages about to be requeued on a
// classic queue (nack_mode=requeue, or a republish that failed), which the
// broker does not count, and forgets the others.
func (r *receiver) remember(handles []driver.Settle, gen uint64, ops map[uint64]settleOp) {
	if r.quorum {
		return
	}
	for _, s := range handles {
		h := s.Handle.(*handle)
		if h.gen != gen {
			continue
		}
		if ops[h.del.DeliveryTag] == opRequeue {
			r.d.requeued.Remember(r.memoKey(h.id), h.attempt+1)
		} else {
			r.d.requeued.Forget(r.memoKey(h.id))
		}
	}
}

// Release implements driver.Receiver: the consumer is cancelled (so that
// nothing more is delivered to it) and unsettled messages go back to the
// queue at once, counted as a redelivery: on quorum queues by requeue (the
// broker counts), on classic queues like a plain Nack (a copy with the next
// attempt, then the ack of the original, with nack_mode=republish; a
// requeue remembered in process with nack_mode=requeue).
func (r *receiver) Release(ctx context.Context, handles []any) error {
	r.mu.Lock()
	gen, ch, tag := r.gen, r.ch, r.tag
	r.mu.Unlock()
	if ch == nil || ch.IsClosed() {
		return nil // the broker requeued everything unacked on it
	}
	// No wait for cancel-ok: the broker handles the cancel before the acks
	// and nacks that follow on the channel, and a broker that stopped
	// answering does not hold Release up.
	if err := ch.Cancel(tag, true); err != nil {
		return fmt.Errorf("relay/amqp: cancelling the consumer: %w", err)
	}
	ops := make(map[uint64]settleOp, len(handles))
	var repub []repubItem
	settles := make([]driver.Settle, 0, len(handles))
	for _, x := range handles {
		h := x.(*handle)
		if h.gen != gen {
			continue
		}
		settles = append(settles, driver.Settle{Handle: h})
		if r.republish && !r.quorum {
			repub = append(repub, repubItem{h: h})
		} else {
			ops[h.del.DeliveryTag] = opRequeue
		}
	}
	r.republishOrRequeue(ctx, repub, ops)
	r.remember(settles, gen, ops)
	return r.apply(gen, ops)
}

// apply sends ops for the channel of generation gen. Runs of one kind at the
// head of the unsettled window become one "multiple" ack or nack; the rest
// are sent one by one.
func (r *receiver) apply(gen uint64, ops map[uint64]settleOp) error {
	if len(ops) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen || r.ch == nil {
		return nil
	}
	ch := r.ch
	send := func(tag uint64, multiple bool, op settleOp) error {
		switch op {
		case opAck:
			return ch.Ack(tag, multiple)
		case opRequeue:
			return ch.Nack(tag, multiple, true)
		default:
			return ch.Nack(tag, multiple, false)
		}
	}
	out := r.outstanding
	var err error
	i := 0
	for i < len(out) && err == nil {
		op, ok := ops[out[i]]
		if !ok {
			break
		}
		j := i
		for j+1 < len(out) && ops[out[j+1]] == op {
			j++
		}
		err = send(out[j], j > i, op)
		i = j + 1
	}
	kept := out[:0]
	for _, tag := range out[i:] {
		op, ok := ops[tag]
		if !ok {
			kept = append(kept, tag)
			continue
		}
		if err == nil {
			err = send(tag, false, op)
		}
	}
	r.outstanding = kept
	if err != nil && ch.IsClosed() {
		return nil // the broker requeues everything unacked on it
	}
	return err
}

// republishCopies publishes a copy of each item with confirms: to the
// group's queue, or to a delay queue that dead-letters it there after its
// delay. It reports which copies the broker confirmed.
func (r *receiver) republishCopies(ctx context.Context, items []repubItem) []bool {
	done := make([]bool, len(items))
	pc, err := r.pubChannel(ctx)
	if err != nil {
		r.log.Warn("relay: cannot republish nacked messages; requeueing them", "err", err)
		return done
	}
	dest := make([]string, len(items))
	copies := make([]amqp091.Publishing, len(items))
	limit := headerLimit(int(r.d.sup.frameMax.Load()))
	for i, it := range items {
		copies[i] = r.copyOf(it)
		if publishingHeaderSize(&copies[i]) > limit {
			// Headers grew past frame_max (the broker would drop the
			// connection): redeliver this one by broker requeue instead.
			dest[i] = ""
			continue
		}
		if it.delay <= 0 {
			dest[i] = r.queue
			continue
		}
		k := delayBucket(it.delay)
		if r.delayReady[k] != pc.gen {
			err := r.d.sup.rpc(ctx, pc.conn, func() error {
				pc.lock() // one RPC at a time on the channel
				defer pc.unlock()
				_, err := declareDelayQueue(pc.ch, r.queue, k)
				return err
			})
			if err != nil {
				r.log.Warn("relay: cannot declare delay queue; requeueing", "err", err)
				r.dropPub()
				return done
			}
			r.delayReady[k] = pc.gen
		}
		dest[i] = delayQueue(r.queue, k)
	}
	var idx []int
	for i := range items {
		if dest[i] != "" {
			idx = append(idx, i)
		}
	}
	res := pc.send(ctx, "", len(idx), func(j int) (string, amqp091.Publishing) {
		return dest[idx[j]], copies[idx[j]]
	})
	for j, i := range idx {
		done[i] = res.status[j] == stOK
	}
	if res.chanErr != nil {
		r.dropPub()
	}
	return done
}

// copyOf builds the republished copy of a delivery: same properties, body
// and publisher headers, the Key and the next attempt in relay headers,
// and the delay as per-message expiration.
func (r *receiver) copyOf(it repubItem) amqp091.Publishing {
	d := it.h.del
	h := cleanHeaders(d.Headers, r.isDelay)
	h[headerKey] = it.h.key
	h[headerAttempt] = strconv.Itoa(it.h.attempt + 1)
	p := amqp091.Publishing{
		Headers:         h,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp091.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       it.h.id,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Body:            d.Body,
	}
	if it.delay > 0 {
		ms := (it.delay + time.Millisecond - 1) / time.Millisecond
		p.Expiration = strconv.FormatInt(int64(ms), 10)
	}
	return p
}

func (r *receiver) pubChannel(ctx context.Context) (*pubChan, error) {
	if r.pub != nil && r.pub.usable(r.d.sup.current()) {
		return r.pub, nil
	}
	r.dropPub()
	pc, err := openPubChan(ctx, r.d.sup, true, true)
	if err != nil {
		return nil, err
	}
	r.pub = pc
	return pc, nil
}

func (r *receiver) dropPub() {
	if r.pub != nil {
		pc := r.pub
		r.pub = nil
		r.d.bg.Add(1)
		go func() {
			defer r.d.bg.Done()
			_ = pc.ch.Close()
			<-pc.done
		}()
	}
}

// Close implements driver.Receiver: the consumer's channel closes, which
// returns any message still unacked on it to the queue.
func (r *receiver) Close(context.Context) error {
	r.mu.Lock()
	ch := r.ch
	r.ch, r.deliveries, r.outstanding = nil, nil, nil
	r.mu.Unlock()
	r.d.forget(r)
	r.d.closeChannel(ch)
	r.dropPub()
	return nil
}
