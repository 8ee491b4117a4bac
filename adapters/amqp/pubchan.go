package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A pubChan is a publishing channel shared by concurrent Publish calls.
//
// Publishers register each message under the delivery tag it will get
// before writing it. One dispatcher goroutine per channel reads the
// broker's confirms and returns and completes the registered messages. The
// broker sends a message's basic.return before its basic.ack, and the
// client library hands both to us from one goroutine in that order, so the
// dispatcher, by draining pending returns before it handles each confirm,
// always knows whether a confirmed message was returned (unroutable).

// confirmWindow bounds the unconfirmed messages of one Publish call, so a
// huge batch does not pile up in the broker's and the client's bookkeeping.
const confirmWindow = 1024

// notifyBuffer sizes the confirm and return channels; the dispatcher drains
// them continuously, so this only absorbs bursts.
const notifyBuffer = 512

var errChannelGone = errors.New("relay/amqp: channel closed before the broker confirmed")

type pubChan struct {
	sup       *supervisor
	conn      *amqp091.Connection // ch's
	ch        *amqp091.Channel
	gen       uint64
	confirm   bool
	mandatory bool
	closed    chan *amqp091.Error

	// wlock serializes tag assignment, writing and RPCs: a mutex that a
	// Publish can stop waiting for when its ctx ends (a write blocked on a
	// broker that stopped reading may hold it).
	wlock chan struct{}

	pmu     sync.Mutex
	pending map[uint64]pendingMsg
	dead    bool
	reason  error

	returned map[string][]amqp091.Return // dispatcher only
	done     chan struct{}               // closed when the dispatcher exits
}

type pendingMsg struct {
	id string
	b  *pubBatch
	i  int
}

// pubBatch collects the outcome of one send call.
type pubBatch struct {
	mu       sync.Mutex
	status   []sendStatus
	returns  map[int]amqp091.Return
	finished int
	progress chan struct{} // signalled on every completion
}

func (b *pubBatch) complete(i int, st sendStatus, r *amqp091.Return) {
	b.mu.Lock()
	b.status[i] = st
	if r != nil {
		if b.returns == nil {
			b.returns = map[int]amqp091.Return{}
		}
		b.returns[i] = *r
	}
	b.finished++
	b.mu.Unlock()
	select {
	case b.progress <- struct{}{}:
	default:
	}
}

func (b *pubBatch) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.finished
}

// openPubChan opens a publishing channel on the current connection, within
// ctx.
func openPubChan(ctx context.Context, sup *supervisor, confirm, mandatory bool) (*pubChan, error) {
	ch, conn, gen, err := sup.openChannel(ctx)
	if err != nil {
		return nil, err
	}
	pc := &pubChan{
		sup: sup, conn: conn, ch: ch, gen: gen, confirm: confirm, mandatory: mandatory,
		closed:   ch.NotifyClose(make(chan *amqp091.Error, 1)),
		wlock:    make(chan struct{}, 1),
		pending:  map[uint64]pendingMsg{},
		returned: map[string][]amqp091.Return{},
		done:     make(chan struct{}),
	}
	if !confirm {
		close(pc.done)
		return pc, nil
	}
	if err := sup.rpc(ctx, conn, func() error { return ch.Confirm(false) }); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("relay/amqp: enabling publisher confirms: %w", err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, notifyBuffer))
	var returns chan amqp091.Return
	if mandatory {
		returns = ch.NotifyReturn(make(chan amqp091.Return, notifyBuffer))
	}
	go pc.dispatch(confirms, returns)
	return pc, nil
}

// lock takes wlock, waiting as long as it takes (for RPCs run by bounded).
func (pc *pubChan) lock() { pc.wlock <- struct{}{} }

func (pc *pubChan) unlock() { <-pc.wlock }

func (pc *pubChan) usable(gen uint64) bool {
	if pc.ch.IsClosed() || pc.gen != gen {
		return false
	}
	pc.pmu.Lock()
	defer pc.pmu.Unlock()
	return !pc.dead
}

func (pc *pubChan) dispatch(confirms <-chan amqp091.Confirmation, returns <-chan amqp091.Return) {
	defer close(pc.done)
	drain := func() {
		for returns != nil {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
					return
				}
				pc.returned[r.MessageId] = append(pc.returned[r.MessageId], r)
			default:
				return
			}
		}
	}
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			pc.returned[r.MessageId] = append(pc.returned[r.MessageId], r)
		case c, ok := <-confirms:
			if !ok {
				pc.fail()
				return
			}
			drain()
			pc.settle(c)
		}
	}
}

func (pc *pubChan) settle(c amqp091.Confirmation) {
	pc.pmu.Lock()
	e, ok := pc.pending[c.DeliveryTag]
	delete(pc.pending, c.DeliveryTag)
	pc.pmu.Unlock()
	rs := pc.returned[e.id]
	if !ok {
		return
	}
	switch {
	case !c.Ack:
		e.b.complete(e.i, stNacked, nil)
	case len(rs) > 0:
		r := rs[0]
		if len(rs) == 1 {
			delete(pc.returned, e.id)
		} else {
			pc.returned[e.id] = rs[1:]
		}
		e.b.complete(e.i, stUnroutable, &r)
	default:
		e.b.complete(e.i, stOK, nil)
	}
}

// fail completes every unconfirmed message as lost: the channel is gone.
func (pc *pubChan) fail() {
	var reason error = errChannelGone
	select {
	case e, ok := <-pc.closed:
		if ok && e != nil {
			reason = e
		}
	default:
	}
	pc.pmu.Lock()
	pc.dead = true
	pc.reason = reason
	pending := pc.pending
	pc.pending = map[uint64]pendingMsg{}
	pc.pmu.Unlock()
	for _, e := range pending {
		e.b.complete(e.i, stLost, nil)
	}
	pc.returned = nil
}

func (pc *pubChan) deathReason() error {
	pc.pmu.Lock()
	defer pc.pmu.Unlock()
	return pc.reason
}

type sendStatus uint8

const (
	stPending sendStatus = iota // not completed: ctx ended first
	stLost                      // not sent, or sent and not confirmed before the channel closed
	stOK
	stUnroutable
	stNacked
)

type sendResult struct {
	status  []sendStatus
	returns map[int]amqp091.Return
	chanErr error // why messages were lost, when they were
	waitErr error // why messages are still pending, when they are
}

// send publishes n messages in order, pipelined (at most confirmWindow of
// them unconfirmed), and waits for their confirms within ctx; item(i)
// gives the routing key and the publishing of message i. Other sends may
// use pc at the same time.
func (pc *pubChan) send(ctx context.Context, ex string, n int, item func(int) (string, amqp091.Publishing)) sendResult {
	b := &pubBatch{status: make([]sendStatus, n), progress: make(chan struct{}, 1)}
	sent := 0
	var chanErr, waitErr error
	ctxDone := false
	// A write blocks once the socket's buffers are full: the broker stopped
	// reading. If ctx ends during one, the connection is abandoned (see
	// bounded), which fails the write; nothing else can interrupt it.
	var writing atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		if writing.Load() {
			pc.sup.abandon(pc.conn, fmt.Errorf("the broker did not take a publish in time: %w", ctx.Err()))
		}
	})
	defer stop()
publish:
	for sent < n {
		if pc.confirm {
			for sent-b.count() >= confirmWindow {
				select {
				case <-b.progress:
				case <-ctx.Done():
					ctxDone = true
					break publish
				}
			}
		}
		if err := pc.sup.waitUnblocked(ctx); err != nil {
			waitErr = err
			ctxDone = true
			break
		}
		if ctx.Err() != nil {
			ctxDone = true
			break
		}
		select {
		case pc.wlock <- struct{}{}:
		case <-ctx.Done():
			ctxDone = true
			break publish
		}
		for k := 0; k < confirmWindow && sent < n; k++ {
			key, p := item(sent)
			var tag uint64
			if pc.confirm {
				pc.pmu.Lock()
				if pc.dead {
					chanErr = pc.reason
					pc.pmu.Unlock()
					break
				}
				tag = pc.ch.GetNextPublishSeqNo()
				pc.pending[tag] = pendingMsg{id: p.MessageId, b: b, i: sent}
				pc.pmu.Unlock()
			}
			writing.Store(true)
			if ctx.Err() != nil { // the AfterFunc may have run before the Store
				writing.Store(false)
				if pc.confirm {
					pc.pmu.Lock()
					delete(pc.pending, tag)
					pc.pmu.Unlock()
				}
				ctxDone = true
				break
			}
			err := pc.ch.Publish(ex, key, pc.mandatory, false, p)
			writing.Store(false)
			if err != nil {
				if pc.confirm {
					pc.pmu.Lock()
					delete(pc.pending, tag)
					pc.pmu.Unlock()
				}
				chanErr = err
				break
			}
			if !pc.confirm {
				b.status[sent] = stOK
			}
			sent++
			if pc.confirm && sent-b.count() >= confirmWindow {
				break
			}
		}
		pc.unlock()
		if chanErr != nil {
			break
		}
	}
	if pc.confirm && !ctxDone {
		for b.count() < sent {
			select {
			case <-b.progress:
			case <-ctx.Done():
				ctxDone = true
			}
			if ctxDone {
				break
			}
		}
	}
	b.mu.Lock()
	res := sendResult{status: append([]sendStatus(nil), b.status...), returns: b.returns}
	b.mu.Unlock()
	for i := sent; i < n; i++ {
		if chanErr != nil {
			res.status[i] = stLost
		} else {
			res.status[i] = stPending
		}
	}
	for _, st := range res.status {
		if st == stLost {
			if chanErr == nil {
				chanErr = pc.deathReason()
			}
			if chanErr == nil {
				chanErr = errChannelGone
			}
			break
		}
	}
	res.chanErr = chanErr
	res.waitErr = waitErr
	return res
}
