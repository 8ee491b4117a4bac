package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/backoff"
	"github.com/go-relay/relay/internal/driver"
)

// confirmWindow bounds the unconfirmed messages of one channel. It also
// sizes the channel's return buffer, so that the connection's reader never
// waits for us (a return always precedes its message's confirm).
const confirmWindow = 512

// maxRefusals bounds retries of a batch after channel-level refusals
// (exchange deleted under us and the like).
const maxRefusals = 3

// Publisher is a relay.Publisher for RabbitMQ. It is safe for concurrent
// use; see Config for its options and NewPublisher for its behaviour.
type Publisher struct {
	*driver.Publisher
	d *pubDriver
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
// Publish waits for the reconnect (within ctx) and publishes the
// unconfirmed messages again, so a message may reach the broker twice
// (at-least-once).
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
		slots:    make(chan struct{}, cfg.PublishChannels),
		declared: map[string]uint64{},
	}
	return &Publisher{Publisher: driver.NewPublisher(d, 0), d: d}, nil
}

func capabilities(cfg *Config) relay.Capabilities {
	c := relay.Capabilities{
		Backend:             "amqp",
		Durable:             true,
		CrossProcess:        true,
		Ordering:            relay.OrderPerTopic,
		NativeDelay:         cfg.NativeDelay && cfg.RequeueOnNack,
		NativeDeadLetter:    true,
		AttemptFromBroker:   cfg.QueueType == QueueQuorum,
		MaxMessageBytes:     cfg.MaxBytes,
		RetainedBeforeGroup: "not kept: with mandatory (default) Publish fails with ErrUnroutable while no group queue is bound; Provision declares a group ahead",
	}
	if c.NativeDelay {
		c.MaxDelay = MaxDelay
	}
	return c
}

type pubDriver struct {
	cfg   Config
	sup   *supervisor
	names names
	caps  relay.Capabilities

	slots chan struct{} // one token per channel in use

	mu       sync.Mutex
	idle     []*pubChan
	declared map[string]uint64 // exchange → connection generation it was declared on

	bg sync.WaitGroup // background channel closes
}

type pubChan struct {
	ch      *amqp091.Channel
	gen     uint64
	returns chan amqp091.Return // nil unless mandatory
	closed  chan *amqp091.Error
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

func (d *pubDriver) ValidateTopic(topic string) error { return d.names.validatePublish(topic) }

func (d *pubDriver) ValidateMessage(_ string, m *relay.Message) error {
	if err := validateMessage(m); err != nil {
		return err
	}
	limit := headerLimit(int(d.sup.frameMax.Load()))
	if n := messageHeaderSize(m); n > limit {
		return &relay.LimitError{MessageID: m.ID, What: "metadata size", Limit: limit, Actual: n,
			Detail: fmt.Sprintf("ID and metadata encode to %d bytes; an AMQP content header must fit the connection's frame_max (%d bytes of payload)", n, limit)}
	}
	return nil
}

// acquire takes a channel from the pool, opening one if needed; it waits
// for a free slot and for the connection within ctx.
func (d *pubDriver) acquire(ctx context.Context) (*pubChan, error) {
	select {
	case d.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	cur := d.sup.current()
	d.mu.Lock()
	for len(d.idle) > 0 {
		pc := d.idle[len(d.idle)-1]
		d.idle = d.idle[:len(d.idle)-1]
		if pc.gen == cur && !pc.ch.IsClosed() {
			d.mu.Unlock()
			return pc, nil
		}
		d.discard(pc)
	}
	d.mu.Unlock()
	pc, err := d.open(ctx)
	if err != nil {
		<-d.slots
		return nil, err
	}
	return pc, nil
}

func (d *pubDriver) open(ctx context.Context) (*pubChan, error) {
	return openPubChan(ctx, d.sup, d.cfg.Confirm, d.cfg.Mandatory)
}

// openPubChan opens a publishing channel on the current connection.
func openPubChan(ctx context.Context, sup *supervisor, confirm, mandatory bool) (*pubChan, error) {
	ch, gen, err := sup.openChannel(ctx)
	if err != nil {
		return nil, err
	}
	pc := &pubChan{ch: ch, gen: gen, closed: ch.NotifyClose(make(chan *amqp091.Error, 1))}
	if confirm {
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return nil, fmt.Errorf("amqp: enabling publisher confirms: %w", err)
		}
	}
	if mandatory {
		pc.returns = ch.NotifyReturn(make(chan amqp091.Return, confirmWindow))
	}
	return pc, nil
}

// release gives pc back to the pool, or closes it when it is in an unknown
// state.
func (d *pubDriver) release(pc *pubChan, reusable bool) {
	d.mu.Lock()
	if reusable && !pc.ch.IsClosed() {
		d.idle = append(d.idle, pc)
	} else {
		d.discard(pc)
	}
	d.mu.Unlock()
	<-d.slots
}

// discard closes pc in the background. Called with d.mu held.
func (d *pubDriver) discard(pc *pubChan) {
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		_ = pc.ch.Close()
	}()
}

func (d *pubDriver) ensureExchange(pc *pubChan, ex string) error {
	d.mu.Lock()
	g, ok := d.declared[ex]
	d.mu.Unlock()
	if ok && g == pc.gen {
		return nil
	}
	if err := declareExchange(pc.ch, ex, d.cfg.ExchangeKind); err != nil {
		return err
	}
	d.mu.Lock()
	d.declared[ex] = pc.gen
	d.mu.Unlock()
	return nil
}

func (d *pubDriver) forgetExchange(ex string) {
	d.mu.Lock()
	delete(d.declared, ex)
	d.mu.Unlock()
}

// SendBatch implements driver.PublishDriver.
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	ex := d.names.exchange(topic)
	pending := make([]*relay.Message, len(msgs))
	copy(pending, msgs)
	var failed []relay.MessageFailure
	bo := backoff.Backoff{Initial: d.cfg.ReconnectMin, Max: d.cfg.ReconnectMax}
	refusals := 0
	var lastErr error
	giveUp := func(err error) error {
		for _, m := range pending {
			failed = append(failed, relay.MessageFailure{ID: m.ID, Err: err})
		}
		return d.result(msgs, failed)
	}
	for len(pending) > 0 {
		if lastErr != nil {
			if !bo.Sleep(ctx) {
				return giveUp(fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr))
			}
		}
		pc, err := d.acquire(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, relay.ErrClosed) {
				return giveUp(err)
			}
			lastErr = err
			continue
		}
		if err := d.ensureExchange(pc, ex); err != nil {
			d.release(pc, false)
			if isPermanent(err) {
				return giveUp(err)
			}
			lastErr = err
			continue
		}
		res := pc.send(ctx, ex, len(pending), func(i int) (string, amqp091.Publishing) {
			return pending[i].Key, encode(pending[i])
		}, d.cfg.Confirm, d.cfg.Mandatory)
		d.release(pc, res.reusable)
		var next []*relay.Message
		for i, m := range pending {
			switch res.status[i] {
			case stOK:
			case stUnroutable:
				r := res.returned[m.ID]
				failed = append(failed, relay.MessageFailure{ID: m.ID, Err: &UnroutableError{
					MessageID: m.ID, Exchange: r.Exchange, RoutingKey: r.RoutingKey, ReplyCode: r.ReplyCode, ReplyText: r.ReplyText}})
			case stNacked:
				failed = append(failed, relay.MessageFailure{ID: m.ID, Err: ErrNacked})
			case stCtx:
				failed = append(failed, relay.MessageFailure{ID: m.ID, Err: ctx.Err()})
			default: // stLost: the channel or connection went away
				next = append(next, m)
			}
		}
		pending = next
		if len(pending) == 0 {
			break
		}
		lastErr = res.chanErr
		if lastErr == nil {
			lastErr = errors.New("amqp: channel closed before the broker confirmed")
		}
		if isNotFound(lastErr) {
			d.forgetExchange(ex)
		}
		if isPermanent(lastErr) || isNotFound(lastErr) {
			if refusals++; refusals > maxRefusals || isPermanent(lastErr) {
				return giveUp(fmt.Errorf("amqp: publishing to exchange %q: %w", ex, lastErr))
			}
		}
	}
	return d.result(msgs, failed)
}

// result turns failures into Publish's error: nil, a plain error when every
// message failed for one reason that is not about the messages, or a
// *relay.PublishError.
func (d *pubDriver) result(msgs []*relay.Message, failed []relay.MessageFailure) error {
	if len(failed) == 0 {
		return nil
	}
	if len(failed) == len(msgs) {
		first := failed[0].Err
		same := true
		for _, f := range failed[1:] {
			if f.Err != first {
				same = false
				break
			}
		}
		if same && first != nil && !errors.Is(first, ErrUnroutable) && !errors.Is(first, ErrNacked) {
			return first
		}
	}
	return &relay.PublishError{Failed: failed}
}

type sendStatus uint8

const (
	stLost sendStatus = iota // not sent, or sent and not confirmed before the channel closed
	stOK
	stUnroutable
	stNacked
	stCtx
)

type sendResult struct {
	status   []sendStatus
	returned map[string]amqp091.Return
	reusable bool
	chanErr  error
}

// send publishes n messages pipelined, at most confirmWindow unconfirmed at
// a time, and waits for their confirms; item(i) gives the routing key and
// the publishing of message i. pc is owned by the caller, so every return
// read from pc.returns belongs to these messages.
func (pc *pubChan) send(ctx context.Context, ex string, n int, item func(int) (string, amqp091.Publishing), confirm, mandatory bool) sendResult {
	res := sendResult{status: make([]sendStatus, n)}
	dcs := make([]*amqp091.DeferredConfirmation, n)
	ids := make([]string, n)
	record := func(r amqp091.Return) {
		if res.returned == nil {
			res.returned = map[string]amqp091.Return{}
		}
		res.returned[r.MessageId] = r
	}
	returns := pc.returns
	drain := func() {
		for returns != nil {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
					return
				}
				record(r)
			default:
				return
			}
		}
	}
	wait := func(dc *amqp091.DeferredConfirmation) bool {
		for {
			select {
			case <-dc.Done():
				return true
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				record(r)
			case <-ctx.Done():
				return false
			}
		}
	}
	sent := 0
	ctxDone := false
	for i := range n {
		if confirm && i >= confirmWindow {
			if !wait(dcs[i-confirmWindow]) {
				ctxDone = true
				break
			}
		}
		if ctx.Err() != nil {
			ctxDone = true
			break
		}
		key, p := item(i)
		ids[i] = p.MessageId
		dc, err := pc.ch.PublishWithDeferredConfirm(ex, key, mandatory, false, p)
		if err != nil {
			res.chanErr = err
			break
		}
		dcs[i] = dc
		sent++
	}
	if confirm && !ctxDone {
		for i := range sent {
			if !wait(dcs[i]) {
				ctxDone = true
				break
			}
		}
	}
	drain()
	closed := pc.ch.IsClosed()
	if closed {
		select {
		case e := <-pc.closed:
			if e != nil {
				res.chanErr = e
			}
		default:
		}
	}
	for i := range n {
		switch {
		case i >= sent:
			if res.chanErr != nil {
				res.status[i] = stLost
			} else {
				res.status[i] = stCtx
			}
		case !confirm:
			res.status[i] = stOK
		case !isDone(dcs[i]):
			res.status[i] = stCtx
		case dcs[i].Acked():
			if _, ret := res.returned[ids[i]]; ret {
				res.status[i] = stUnroutable
			} else {
				res.status[i] = stOK
			}
		case closed:
			res.status[i] = stLost
		default:
			res.status[i] = stNacked
		}
	}
	res.reusable = !ctxDone && res.chanErr == nil && !closed
	return res
}

func isDone(dc *amqp091.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
}

// Close implements driver.PublishDriver.
func (d *pubDriver) Close() error {
	d.mu.Lock()
	for _, pc := range d.idle {
		d.discard(pc)
	}
	d.idle = nil
	d.mu.Unlock()
	err := d.sup.close(5 * time.Second)
	d.bg.Wait()
	return err
}

// Health implements relay.HealthChecker: nil while connected.
func (d *pubDriver) Health() error { return d.sup.health() }
