package mqtt

import (
	"context"
	"fmt"
	"sync"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/go-relay/relay/driver"
)

// receiver is one subscription: a persistent session (whose client ID it
// holds the host's claim on), connected by one paho client at a time.
//
// The broker pushes up to its inflight limit of unacknowledged messages;
// onMessage queues them for Receive. Ack sends PUBACK, in settlement
// order (MQTT 3.1.1 asks for the order of reception; brokers that match
// PUBACKs by packet identifier, Mosquitto among them, accept any). Nack
// queues the message again, with no PUBACK.
//
// After a lost connection, the next Receive connects a new client (the
// shared layer backs off between failed calls), and the broker resends
// the session's unacknowledged messages marked DUP under their packet
// identifiers: one that a delivery of an earlier connection still holds
// becomes that delivery again (its ack goes on the new connection), one
// acked while no connection was up is acked then; neither is delivered
// twice.
type receiver struct {
	cfg     Config
	filter  string // $share/<group>/<topic>
	session string
	release func()
	arena   driver.Arena // Receive only
	raw     [][]byte     // Receive only

	mu     sync.Mutex
	client paho.Client
	epoch  uint64        // counts connections; a delivery's epoch is the one it came on
	lost   chan struct{} // open while the connection of epoch may be up; nil when it is not
	why    error         // why the last connection was lost
	// queue holds what was received or nacked, for Receive; unbounded,
	// since the broker pushes at most its inflight limit unacknowledged.
	queue *driver.ReadAhead[*delivery]
	held  map[uint16]*delivery // by packet identifier: delivered at QoS 1 and not acked
	doubt map[uint16]bool      // acked while no connection was up: acked again when resent
}

// delivery is a message and the handle of its settlement.
type delivery struct {
	msg     paho.Message
	epoch   uint64
	attempt int // of its next or current delivery
}

// resent remembers, by session and packet identifier, the attempt of each
// message a subscription released, for its resend to the next connection
// of the session (in this process).
var resent driver.AttemptMemo[sessionPacket]

type sessionPacket struct {
	session string
	id      uint16
}

// onMessage takes a PUBLISH from paho's dispatch goroutine; it must not
// block. A message flagged retained is the copy of a topic's retained
// message that the broker sends when a subscription is made (mosquitto
// 2.0.11 does so for shared subscriptions too, and relay subscribes on
// every connection): either older than the group or one the group got
// when it was published. It is acked, not delivered.
func (r *receiver) onMessage(_ paho.Client, m paho.Message) {
	if m.Retained() {
		m.Ack()
		return
	}
	id, qos1 := m.MessageID(), m.Qos() > 0
	r.mu.Lock()
	if qos1 {
		if d := r.held[id]; d != nil && d.epoch != r.epoch {
			if m.Duplicate() {
				d.msg, d.epoch = m, r.epoch // the broker resends what is held here
				r.mu.Unlock()
				return
			}
			delete(r.held, id) // not a resend: the broker let go of it
		}
		if r.doubt[id] {
			delete(r.doubt, id)
			if m.Duplicate() {
				r.mu.Unlock()
				m.Ack()
				return
			}
		}
	}
	d := &delivery{msg: m, epoch: r.epoch, attempt: 1}
	if m.Duplicate() {
		// Sent before: to this session's last subscription here (which
		// remembered its attempt) or to a connection or process gone since.
		d.attempt = max(2, resent.Take(sessionPacket{r.session, id})+1)
	}
	if qos1 {
		r.held[id] = d
	}
	r.queue.Push(d)
	r.mu.Unlock()
	r.queue.Wake()
}

// onLost marks the connection of epoch lost.
func (r *receiver) onLost(epoch uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epoch == epoch && r.lost != nil {
		close(r.lost)
		r.lost, r.why = nil, err
	}
}

// connect opens a connection of the session with a new client and
// subscribes it (again: the session may have been lost). When the broker
// kept no session, the deliveries held from earlier connections can no
// longer be acked.
func (r *receiver) connect(ctx context.Context) error {
	r.mu.Lock()
	r.epoch++
	epoch, lost := r.epoch, make(chan struct{})
	r.lost = lost
	cl := r.cfg.newClient(r.session, false, r.onMessage, func(_ paho.Client, err error) { r.onLost(epoch, err) })
	r.client = cl
	r.mu.Unlock()
	present, err := connect(ctx, cl)
	if err == nil {
		err = subscribe(ctx, cl, r.filter)
		if err != nil {
			cl.Disconnect(0)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if r.lost == lost {
			close(lost)
			r.lost = nil
		}
		return err
	}
	if !present {
		for id, d := range r.held {
			if d.epoch != epoch {
				delete(r.held, id)
			}
		}
		clear(r.doubt)
	}
	return nil
}

// Receive implements driver.Receiver: the queued messages (up to max), or
// it waits for one. It connects when no connection is up, and returns an
// error when the connection is lost, so that the shared layer counts the
// failure and backs off before the next call connects again.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		r.mu.Lock()
		if n := min(max, r.queue.Len()); n > 0 {
			// Payloads read under the lock: a resend may rebind d.msg.
			out, raw := make([]driver.Received, n), r.raw[:0]
			for i := range out {
				d, _ := r.queue.Pop()
				out[i] = driver.Received{Attempt: d.attempt, Handle: d}
				raw = append(raw, d.msg.Payload())
			}
			r.mu.Unlock()
			for i, p := range raw {
				out[i].Msg = decode(p, &r.arena)
			}
			clear(raw)
			r.raw = raw
			return out, nil
		}
		lost, why := r.lost, r.why
		r.why = nil
		r.mu.Unlock()
		if why != nil {
			return nil, fmt.Errorf("relay/mqtt: session %s: connection lost: %w", r.session, why)
		}
		if lost == nil {
			if err := r.connect(ctx); err != nil {
				return nil, err
			}
			continue
		}
		select {
		case <-r.queue.Ready():
		case <-lost:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Settle implements driver.Receiver: PUBACK for each ack (on the
// connection of the delivery, or, when that is gone, once the broker
// resends it), and each nack back to the queue. The acks are handed to
// the client's writer in order; Settle gives up between two when ctx
// ends.
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	var acks []paho.Message
	requeued := false
	r.mu.Lock()
	for _, s := range batch {
		d := s.Handle.(*delivery)
		if !s.Ack {
			d.attempt++
			r.queue.Push(d)
			requeued = true
			continue
		}
		id := d.msg.MessageID()
		if d.msg.Qos() == 0 || r.held[id] != d {
			continue // nothing to acknowledge, or a session the broker lost
		}
		delete(r.held, id)
		if d.epoch == r.epoch && r.lost != nil {
			acks = append(acks, d.msg)
		} else {
			r.doubt[id] = true
		}
	}
	r.mu.Unlock()
	if requeued {
		r.queue.Wake()
	}
	for i, m := range acks {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("relay/mqtt: %d acks not sent: %w", len(acks)-i, err)
		}
		m.Ack()
	}
	return nil
}

// Release implements driver.Receiver. MQTT cannot hand a message back:
// the broker resends a session's unacknowledged messages to it alone,
// when it connects again. So Close leaves them unacknowledged, and the
// next subscription of the session (the same group, instance and topic)
// gets them; Release remembers their attempts for it.
func (r *receiver) Release(_ context.Context, handles []any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range handles {
		d := h.(*delivery)
		if d.msg.Qos() > 0 {
			resent.Remember(sessionPacket{r.session, d.msg.MessageID()}, d.attempt)
		}
	}
	return nil
}

// Close implements driver.Receiver: within ctx, a round trip after the
// acks sent (an UNSUBSCRIBE of flushFilter; the broker handles a
// connection's packets in order), so that the broker has them before a
// subscription of the session that connects at once takes the session
// over (mosquitto may drop what it had not read yet); then it disconnects
// and lets the claim go. The session stays, and the broker queues the
// group's share of messages for it until it connects again.
func (r *receiver) Close(ctx context.Context) error {
	r.mu.Lock()
	cl, up := r.client, r.lost != nil
	r.client, r.lost = nil, nil
	r.queue.Clear()
	r.mu.Unlock()
	var err error
	if cl != nil {
		if up {
			err = await(ctx, cl.Unsubscribe(flushFilter), "waiting for the broker to have the acks")
		}
		cl.Disconnect(quiesce)
	}
	r.release()
	return err
}

// flushFilter is a topic filter no relay subscription uses (relay topics
// do not begin with '$').
const flushFilter = "$relay/flush"

// newReceiver returns the receiver of session (claimed; release lets it
// go) for filter, not connected yet.
func newReceiver(cfg Config, filter, session string, release func()) *receiver {
	return &receiver{cfg: cfg, filter: filter, session: session, release: release,
		queue: driver.NewReadAhead[*delivery](0, 0, nil), held: map[uint16]*delivery{}, doubt: map[uint16]bool{}}
}
