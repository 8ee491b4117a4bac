package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
)

// puller keeps a pull request outstanding on the group's durable consumer
// of one topic and hands out what the server sends it as it arrives, on
// one inbox subscription (request n replies to inbox + "." + n) that lives
// as long as the subscription.
//
// Messages are handed out as they arrive, not when their request ends:
// a request the server can fill only in part (other members took the
// rest, or the group holds max_ack_pending unacknowledged messages) holds
// nothing back, so its messages are processed and acked while it waits,
// and the acks let the server serve the group's other requests. Receiving
// a whole request before handing it out (nats.go's Fetch) deadlocks a
// group whose windows add up to more than max_ack_pending: each member
// holds part of the allowance in a request it cannot finish, until the
// request's expiry (nats.go ends a no-wait request after a second, and
// the server, which keeps a no-wait request that max_ack_pending stalls,
// then delivers to an inbox nobody reads: those messages come back after
// ack_wait).
//
// One request is live at a time, for the free part of the window (the
// max next is given), so the consumer's unacknowledged messages of this
// subscription stay within the window: messages arrive with the topic as
// their subject, so what each of several requests still owes could not be
// told apart. It ends when it has brought its batch, or at its expiry
// (fetch_wait; the server answers 408), or requestGrace after it: nats-
// server before 2.9.16 drops without a word a request that expires while
// it delivers to others. What arrives after a request was given up (only
// what was in flight) is kept and handed out all the same.
//
// next runs on one goroutine; stop after next returned for good.
type puller struct {
	nc      *natsgo.Conn
	c       jetstream.Consumer
	subject string        // the consumer's next-message API subject
	expires time.Duration // of each request: fetch_wait
	inbox   string
	sub     *natsgo.Subscription
	in      chan *natsgo.Msg
	n       uint64        // requests sent
	extra   []*natsgo.Msg // arrived beyond the max of a next call
	timer   *time.Timer
	stopped bool

	// The live request: its reply subject ("" when none), how many
	// messages it may still bring, and when it is given up.
	reply    string
	owed     int
	deadline time.Time
}

// requestGrace is how long after its expiry a request without an answer
// is given up.
const requestGrace = 250 * time.Millisecond

func newPuller(nc *natsgo.Conn, c jetstream.Consumer, stream, consumer string, expires time.Duration, window int) (*puller, error) {
	p := &puller{
		nc:      nc,
		c:       c,
		subject: jetstream.DefaultAPIPrefix + "CONSUMER.MSG.NEXT." + stream + "." + consumer,
		expires: expires,
		inbox:   nc.NewInbox(),
		// Room for a request's batch, twice (what a request given up
		// still brings beside the next one), and the answers: nats.go
		// drops what a full channel cannot take.
		in:    make(chan *natsgo.Msg, 2*window+64),
		timer: time.NewTimer(time.Hour),
	}
	p.timer.Stop()
	sub, err := nc.ChanSubscribe(p.inbox+".*", p.in)
	if err != nil {
		return nil, fetchErr(err)
	}
	p.sub = sub
	return p, nil
}

// next returns between 1 and max messages, waiting for them while ctx
// lasts, or none and a nil error when a request ended empty (the caller
// calls again), or an error: the server refused a request, or ctx ended.
func (p *puller) next(ctx context.Context, max int) ([]*natsgo.Msg, error) {
	out := p.takeExtra(max)
	for {
		var ended bool
		var err error
		out, ended, err = p.drain(out, max)
		switch {
		case len(out) > 0:
			return out, nil
		case err != nil:
			return nil, err
		case ended:
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if p.reply != "" && time.Now().After(p.deadline) {
			p.reply, p.owed = "", 0 // dropped by the server
			return nil, nil
		}
		if p.reply == "" {
			if err := p.request(max); err != nil {
				return nil, err
			}
		}
		select {
		case m := <-p.in:
			isData, ended, err := p.note(m)
			switch {
			case isData:
				out = append(out, m) // with what else has arrived, at the top
			case err != nil:
				return nil, err
			case ended:
				return nil, nil
			}
		case <-p.wake():
		case <-ctx.Done():
		}
	}
}

// takeExtra returns up to max of the messages kept from earlier calls.
func (p *puller) takeExtra(max int) []*natsgo.Msg {
	if len(p.extra) == 0 {
		return nil
	}
	n := min(max, len(p.extra))
	out := append([]*natsgo.Msg(nil), p.extra[:n]...)
	p.extra = append(p.extra[:0], p.extra[n:]...)
	return out
}

// drain adds to out what has arrived, without waiting; messages beyond
// max are kept for the next call. ended reports that the live request
// ended, err that the server refused it.
func (p *puller) drain(out []*natsgo.Msg, max int) (_ []*natsgo.Msg, ended bool, err error) {
	for {
		select {
		case m := <-p.in:
			isData, e, rerr := p.note(m)
			ended = ended || e
			err = cmp.Or(err, rerr)
			if !isData {
				continue
			}
			if len(out) < max {
				out = append(out, m)
			} else {
				p.extra = append(p.extra, m)
			}
		default:
			return out, ended, err
		}
	}
}

// note accounts for m: a message (isData), or the server's answer that
// the live request ended (ended; err when the server refused it).
func (p *puller) note(m *natsgo.Msg) (isData, ended bool, err error) {
	status := ""
	if m.Reply == "" && len(m.Data) == 0 && m.Header != nil { // deliveries have the ack subject as reply
		status = m.Header.Get("Status")
	}
	if status == "" {
		if p.reply != "" {
			if p.owed--; p.owed <= 0 {
				p.reply, p.owed = "", 0 // it has its batch: the server says no more
			}
		}
		return true, false, nil
	}
	if status == "100" || m.Subject != p.reply { // a heartbeat, or a request given up
		return false, false, nil
	}
	p.reply, p.owed = "", 0
	switch status {
	case "404", "408": // expired, or nothing for a no-wait request
		return false, true, nil
	case "503":
		return false, true, fmt.Errorf("relay/nats: pull request: %w", natsgo.ErrNoResponders)
	}
	return false, true, fmt.Errorf("relay/nats: pull request refused: %s %s", status, m.Header.Get("Description"))
}

// request sends a pull request for max messages minus those kept.
func (p *puller) request(max int) error {
	want := max - len(p.extra)
	if want <= 0 {
		return nil
	}
	p.n++
	reply := p.inbox + "." + strconv.FormatUint(p.n, 36)
	body := fmt.Appendf(nil, `{"batch":%d,"expires":%d}`, want, p.expires.Nanoseconds())
	if err := p.nc.PublishRequest(p.subject, reply, body); err != nil {
		return fetchErr(err)
	}
	p.reply, p.owed, p.deadline = reply, want, time.Now().Add(p.expires+requestGrace)
	return nil
}

// wake returns a channel that fires when the live request is given up
// (never when there is none).
func (p *puller) wake() <-chan time.Time {
	if p.reply == "" {
		return nil
	}
	p.timer.Reset(max(time.Until(p.deadline), time.Millisecond))
	return p.timer.C
}

// stop ends the inbox subscription so that nothing the server sends
// afterwards reaches this subscription, and returns what arrived that next
// did not return, for the caller to release. The server is told first
// (UNSUB) and the inbox read until it confirmed (PING/PONG), so that
// what it sent before arrives, and what it would send to a live request
// afterwards finds no subscriber: the server then queues it for the
// group's other requests at once (a message lost in between would wait
// for ack_wait). Then a consumer info request makes the server drop the
// request, which has no subscriber now: nats-server before 2.11 mishandles
// a redelivery (a released message) when the only requests waiting have
// no subscriber: it moves the consumer back over messages already
// delivered, which are delivered again with Attempt 1 (acked ones too),
// while the released message waits out ack_wait. Without the UNSUB, a
// message released while a request is live would be delivered to it
// again. Idempotent; within ctx.
func (p *puller) stop(ctx context.Context) ([]*natsgo.Msg, error) {
	if p.stopped {
		return nil, nil
	}
	p.stopped = true
	p.timer.Stop()
	var err error
	if derr := p.sub.Drain(); derr != nil && !errors.Is(derr, natsgo.ErrConnectionClosed) && !errors.Is(derr, natsgo.ErrBadSubscription) {
		err = fmt.Errorf("relay/nats: ending the inbox subscription: %w", derr)
	} else if derr == nil {
		if ferr := flushConn(ctx, p.nc); ferr != nil {
			err = fmt.Errorf("relay/nats: ending the inbox subscription: %w", ferr)
		}
		// nats.go removes the subscription after a flush of its own,
		// which follows ours: what was queued to the connection before
		// the server had the UNSUB is read until then.
		for p.sub.IsValid() && ctx.Err() == nil {
			_, _, _ = p.drain(nil, 0)
			time.Sleep(time.Millisecond)
		}
	}
	_, _, _ = p.drain(nil, 0) // max 0: everything goes to p.extra
	// Any request, even one given up, may still be queued.
	if p.n > 0 && err == nil {
		if _, ierr := p.c.Info(ctx); ierr != nil {
			err = fmt.Errorf("relay/nats: reading consumer info to end the pull request: %w", ierr)
		}
	}
	p.reply, p.owed = "", 0
	kept := p.extra
	p.extra = nil
	return kept, err
}

func fetchErr(err error) error {
	if errors.Is(err, natsgo.ErrConnectionClosed) {
		return fmt.Errorf("relay/nats: %w: %v", relay.ErrClosed, err)
	}
	return fmt.Errorf("relay/nats: pull request: %w", err)
}
