package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/backoff"
)

// closeWait bounds how long closing a channel may take before the
// connection's close takes over.
const closeWait = 5 * time.Second

// Subscriber is a relay.Subscriber for one group on RabbitMQ, safe for
// concurrent use. It also implements relay.Provisioner.
//
// Each Subscribe declares the topic's exchange, the group's queue and its
// bindings, then consumes the queue on its own channel with a prefetch of
// InFlight. Settlements are batched: runs of acks at the head of the
// unsettled window become one multiple ack. Nack requeues or republishes
// (see NackMode); NackAfter goes through a delay queue; with
// RequeueOnNack=false or at DeliveryLimit the message is rejected to the
// dead-letter exchange. When the connection or the channel drops, the
// subscription re-declares its topology and consumes again; messages
// delivered on the old channel are redelivered by the broker, and settling
// them does nothing.
type Subscriber struct {
	sharedSubscriber
	d *subDriver
}

// sharedSubscriber is the part of the shared layer's subscriber that
// Subscriber offers: relay's interfaces, not the driver's internals.
type sharedSubscriber interface {
	relay.Subscriber
	relay.Provisioner
	relay.CapabilityReporter
	relay.HealthChecker
	relay.LagReporter
	relay.AssignmentReporter
	relay.GroupNamer
	driver.BatchSubscriber
	RemoveTopic(ctx context.Context, topic string) error
}

// State reports the connection state.
func (s *Subscriber) State() State { return s.d.sup.State() }

// NewSubscriber connects to cfg.URL (bounded by ctx and cfg.ConnectTimeout)
// and returns a subscriber for cfg.Group.
func NewSubscriber(ctx context.Context, cfg Config) (*Subscriber, error) {
	if err := cfg.validate(roleSubscriber); err != nil {
		return nil, err
	}
	sup, err := connect(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	d := &subDriver{
		cfg:   cfg,
		sup:   sup,
		names: names{exchangePrefix: cfg.ExchangePrefix, queuePrefix: cfg.QueuePrefix, group: cfg.Group},
		caps:  capabilities(&cfg),
		log:   cfg.logger().With("backend", "amqp", "group", cfg.Group),
	}
	window, maxWindow := driver.AdaptiveWindow(cfg.InFlight, DefaultInFlight)
	if cfg.QueueType != QueueClassic {
		maxWindow = window // see subDriver.adaptive
	}
	d.window, d.maxWindow, d.adaptive = window, maxWindow, maxWindow > window
	s := driver.NewSubscriber(d, driver.Options{InFlight: window, MaxInFlight: maxWindow, InFlightBytes: cfg.InFlightBytes, Logger: cfg.Logger, Group: cfg.Group})
	return &Subscriber{sharedSubscriber: s, d: d}, nil
}

type subDriver struct {
	cfg Config
	// window is where every subscription's window (and prefetch) starts;
	// maxWindow is how far an adaptive one grows.
	window, maxWindow int
	// adaptive: the window grows (inflight= unset, a classic queue), and
	// the broker's limit with it (see prefetch). Quorum queues have no
	// channel limit, so their window stays fixed.
	adaptive bool
	// noChannelLimit: the broker refused a channel's prefetch limit
	// (RabbitMQ 4.3 and later deny global QoS unless
	// deprecated_features.permit.global_qos is set; see prefetch).
	noChannelLimit atomic.Bool
	sup            *supervisor
	names          names
	caps           relay.Capabilities
	log            *slog.Logger

	// requeued remembers the next attempt of messages requeued with
	// basic.nack on a classic queue (nack_mode=requeue, or a republish
	// that failed), which the broker does not count.
	requeued driver.AttemptMemo[memoKey]

	mu     sync.Mutex
	dlxGen uint64
	closed bool // set by Close before it waits for bg
	// live are the receivers not closed yet: Lag counts their
	// unacknowledged deliveries, Assignment reports their state.
	live map[*receiver]struct{}

	bg sync.WaitGroup // background channel closes and Lag declares
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

// forget drops r from the receivers Lag and Assignment look at.
func (d *subDriver) forget(r *receiver) {
	d.mu.Lock()
	delete(d.live, r)
	d.mu.Unlock()
}

// held counts the deliveries of topic that this subscriber's receivers
// hold unacknowledged (received and not settled, or settled and not yet
// sent to the broker).
func (d *subDriver) held(topic string) int64 {
	d.mu.Lock()
	rs := make([]*receiver, 0, len(d.live))
	for r := range d.live {
		if r.topic == topic {
			rs = append(rs, r)
		}
	}
	d.mu.Unlock()
	var n int64
	for _, r := range rs {
		r.mu.Lock()
		n += int64(len(r.outstanding))
		r.mu.Unlock()
	}
	return n
}

// Close implements driver.SubscribeDriver.
func (d *subDriver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	err := d.sup.close(closeWait)
	d.bg.Wait()
	return err
}

// closeChannel closes ch in the background; the connection's close bounds
// it. After Close began, the connection's close closes ch.
func (d *subDriver) closeChannel(ch *amqp091.Channel) {
	if ch == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		_ = ch.Close()
	}()
}

// Provision implements driver.ProvisionDriver: it declares the exchange,
// the group's queue and its bindings, waiting for the connection within ctx.
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	if err := d.names.validateSubscribe(topic); err != nil {
		return err
	}
	bo := backoff.Backoff{Initial: d.cfg.ReconnectMin, Max: d.cfg.ReconnectMax}
	return bo.Retry(ctx, func() error {
		err := d.provisionOnce(ctx, topic)
		if err != nil {
			d.log.Debug("relay: provision failed", "err", err)
		}
		return err
	}, func(err error) bool { return !isPermanent(err) && !errors.Is(err, relay.ErrClosed) })
}

func (d *subDriver) provisionOnce(ctx context.Context, topic string) error {
	conn, gen, err := d.sup.get(ctx)
	if err != nil {
		return err
	}
	if err := d.ensureDLX(ctx, conn, gen); err != nil {
		return err
	}
	ch, err := d.sup.channelOn(ctx, conn)
	if err != nil {
		return err
	}
	defer d.closeChannel(ch)
	return d.sup.rpc(ctx, conn, func() error { return d.declareGroup(ch, topic) })
}

// Subscribe implements driver.SubscribeDriver. When connected it sets the
// subscription up at once, so that configuration errors surface here;
// while reconnecting it returns and the subscription starts once the
// connection is back.
func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	if err := d.names.validateSubscribe(topic); err != nil {
		return nil, err
	}
	q := d.names.queue(topic)
	r := &receiver{
		d:          d,
		topic:      topic,
		queue:      q,
		isDelay:    isRelayQueue(q, d.names.exchange(topic)),
		quorum:     d.cfg.QueueType == QueueQuorum,
		republish:  d.cfg.nackMode() == NackRepublish,
		delayReady: map[int]uint64{},
		log:        d.log.With("topic", topic),
		window:     d.window,
	}
	d.mu.Lock()
	if d.live == nil {
		d.live = map[*receiver]struct{}{}
	}
	d.live[r] = struct{}{}
	d.mu.Unlock()
	if d.sup.current() != 0 {
		// Bounded by connect_timeout too: a broker that does not answer
		// within it is taken as hung (the connection is redialled) and the
		// subscription starts once the connection is back.
		sctx, cancel := context.WithTimeout(ctx, d.cfg.ConnectTimeout)
		err := r.setup(sctx)
		cancel()
		if err != nil {
			if isPermanent(err) || errors.Is(err, relay.ErrClosed) || ctx.Err() != nil {
				d.forget(r)
				return nil, err
			}
			d.log.Warn("relay: subscribing failed; retrying", "topic", topic, "err", err)
		}
	}
	return r, nil
}

// Assignment implements driver.AssignmentDriver: with
// single_active_consumer=true, whether this member is the queue's active
// consumer (a delivery arrived since it last started consuming: a waiting
// one gets none, so an active consumer of an empty queue reports false
// too); competing consumers otherwise.
func (d *subDriver) Assignment(topic string) (relay.Assignment, error) {
	if !d.cfg.SingleActiveConsumer {
		return relay.Assignment{Mode: relay.ShareCompeting}, nil
	}
	var r *receiver
	d.mu.Lock()
	for lr := range d.live {
		if lr.topic == topic {
			r = lr
			break
		}
	}
	d.mu.Unlock()
	if r == nil {
		return relay.Assignment{}, fmt.Errorf("%w: topic %q is not subscribed", relay.ErrNotSupported, topic)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return relay.Assignment{Mode: relay.ShareSingleActive, Active: r.delivered && r.deliveries != nil}, nil
}

// Health implements relay.HealthChecker: nil while connected.
func (d *subDriver) Health() error { return d.sup.health() }

// prefetch sets the limits of a consuming channel whose subscription's
// window is window, before its consumer starts. A fixed window is the
// consumer's prefetch count. An adaptive one needs a limit RabbitMQ
// applies at once when it changes, where a consumer's count holds only
// for consumers started after it: the channel's limit (global, in
// RabbitMQ's terms; the channel carries the subscription's one consumer).
// RabbitMQ checks that limit more slowly than a consumer's (a tenth of
// the consume rate, see docs/perf/defaults.md), so it is only there
// while the window grows: the consumer's count is the largest window,
// and the channel's limit, the current window, is lifted once the
// window reached the largest (see channelLimit and receiver.WindowGrew).
//
// A broker that refuses the channel's limit closes the channel: prefetch
// returns that error, and from then on every channel of d takes the
// consumer's count at the window it has (the window's growth reaches
// the broker with the next channel only).
func (d *subDriver) prefetch(ch *amqp091.Channel, window int) error {
	if !d.adaptive || d.noChannelLimit.Load() || window >= d.maxWindow {
		return ch.Qos(window, 0, false)
	}
	if err := ch.Qos(d.maxWindow, 0, false); err != nil {
		return err
	}
	return d.setChannelLimit(ch, window)
}

// setChannelLimit sets the channel limit of an adaptive window (see
// prefetch), noting a broker that refuses it.
func (d *subDriver) setChannelLimit(ch *amqp091.Channel, window int) error {
	err := qosGlobal(ch, d.channelLimit(window))
	var e *amqp091.Error
	if errors.As(err, &e) && e.Server && refusalCodes[e.Code] && !d.noChannelLimit.Swap(true) {
		d.log.Warn("relay/amqp: the broker refuses a channel prefetch limit (global QoS, denied by default since RabbitMQ 4.3): "+
			"the window grows only as channels are opened again; set inflight= for a fixed window, or permit the feature on the broker", "err", err)
	}
	return err
}

// qosGlobal sets a channel's (global) prefetch count. A variable for
// tests only.
var qosGlobal = func(ch *amqp091.Channel, count int) error { return ch.Qos(count, 0, true) }

// refusalCodes are the channel-close codes with which a broker refuses a
// method it does not allow.
var refusalCodes = map[int]bool{
	amqp091.NotImplemented: true, amqp091.InternalError: true, amqp091.NotAllowed: true,
	amqp091.AccessRefused: true, amqp091.PreconditionFailed: true,
}

// channelLimit is the channel's prefetch limit of an adaptive window:
// the window, and none (0) once it is the largest, where the consumer's
// own count holds it.
func (d *subDriver) channelLimit(window int) int {
	if window >= d.maxWindow {
		return 0
	}
	return window
}
