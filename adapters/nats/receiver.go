package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// receiver is one subscription: pull requests on the group's durable
// consumer of one topic.
type receiver struct {
	c         jetstream.Consumer
	nc        *natsgo.Conn
	stream    string
	fetchWait time.Duration
	// maxPull is the consumer's MaxAckPending (0: none): the server
	// refuses a pull request for more (409 Exceeded MaxAckPending).
	maxPull int
	// drained is set when the last message received was a first delivery
	// that the server sent with nothing more pending for the consumer:
	// the next Receive then skips the no-wait pull, which would come back
	// empty and, with one message in flight, leave one published
	// meanwhile waiting for a second pull request (an extra round trip on
	// most deliveries). Receive runs on one goroutine.
	drained bool

	// nacked remembers, by stream sequence, the attempt of each message
	// this subscription nacked, so that its redelivery here counts at
	// least one more even when the server rolled a delivery back (it
	// lowers a message's delivery count when it took a delivery back from
	// a pull request that ended).
	nacked driver.AttemptMemo[uint64]
}

// Receive takes what is available at once (a no-wait pull of up to max
// messages); when nothing is, it waits up to fetch_wait for one message
// with a pull request, and returns it. After a message the server sent
// with nothing pending behind it (see receiver.drained) it goes straight
// to the waiting pull; a message with more pending, or a redelivery
// (which the pending count does not include), makes the next Receive take
// what is available at once again. It never asks the server for more
// than max, so the consumer's unacknowledged messages stay within the
// shared layer's window, nor for more than the consumer's max_ack_pending,
// which the server would refuse.
//
// A waiting pull request is not abandoned when ctx ends: Receive waits
// for it to end (a message, or the server's timeout after fetch_wait),
// so that no request of an ended subscription is left on the server.
// The server would deliver a released message to such a request, find
// nobody listening and take the delivery back, resetting the message's
// delivery count (nats-server 2.9). Receive therefore returns up to
// fetch_wait (plus nats.go's one-second margin when the server stopped
// answering) after ctx ends.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	if r.maxPull > 0 {
		max = min(max, r.maxPull)
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !r.drained {
			b, err := r.c.FetchNoWait(max)
			if err != nil {
				return nil, fetchErr(err)
			}
			out, err := r.collect(b)
			if len(out) > 0 || err != nil {
				r.noteDrained(out)
				return out, err
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		b, err := r.c.Fetch(1, jetstream.FetchMaxWait(r.fetchWait))
		if err != nil {
			return nil, fetchErr(err)
		}
		out, err := r.collect(b)
		if len(out) > 0 || err != nil {
			r.noteDrained(out)
			return out, err
		}
	}
}

// ackInfo reads the delivery count and the stream sequence from the
// reply subject of a JetStream delivery, without allocating (nats.go's
// Metadata allocates and parses every field, on every delivery).
// The subject is "$JS.ACK.<stream>.<consumer>.<delivered>.<stream
// seq>.<consumer seq>.<time>.<pending>" (9 tokens), or, from newer
// servers, with "<domain>.<account hash>" after "$JS.ACK." and possibly
// more tokens at the end (11 or more). ok is false for anything else.
func ackInfo(reply string) (delivered, streamSeq uint64, ok bool) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(reply, prefix) {
		return 0, 0, false
	}
	var at int // token index of <delivered>
	switch n := strings.Count(reply, ".") + 1; {
	case n == 9:
		at = 4
	case n >= 11:
		at = 6
	default:
		return 0, 0, false
	}
	rest := reply[len(prefix):]
	for range at - 2 { // skip to <delivered>
		_, rest, _ = strings.Cut(rest, ".")
	}
	d, rest, _ := strings.Cut(rest, ".")
	sq, _, _ := strings.Cut(rest, ".")
	delivered, err1 := strconv.ParseUint(d, 10, 64)
	streamSeq, err2 := strconv.ParseUint(sq, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return delivered, streamSeq, true
}

// noteDrained sets r.drained from the last of the messages just received.
func (r *receiver) noteDrained(out []driver.Received) {
	if len(out) == 0 {
		r.drained = false
		return
	}
	last := out[len(out)-1]
	pending, ok := ackPending(last.Handle.(*handle).msg.Reply())
	r.drained = ok && pending == 0 && last.Attempt == 1
}

// ackPending reads the <pending> token of a JetStream delivery's reply
// subject (see ackInfo): how many messages the consumer had left to
// deliver after this one when the server sent it.
func ackPending(reply string) (uint64, bool) {
	if _, _, ok := ackInfo(reply); !ok {
		return 0, false
	}
	at := 8 // token index of <pending>
	if strings.Count(reply, ".") >= 10 {
		at = 10
	}
	rest := reply
	for range at {
		_, rest, _ = strings.Cut(rest, ".")
	}
	tok, _, _ := strings.Cut(rest, ".")
	n, err := strconv.ParseUint(tok, 10, 64)
	return n, err == nil
}

func fetchErr(err error) error {
	if errors.Is(err, natsgo.ErrConnectionClosed) {
		return fmt.Errorf("relay/nats: %w: %v", relay.ErrClosed, err)
	}
	return fmt.Errorf("relay/nats: pull request: %w", err)
}

// collect reads every message of b until its pull request ends.
func (r *receiver) collect(b jetstream.MessageBatch) ([]driver.Received, error) {
	var out []driver.Received
	for m := range b.Messages() {
		attempt, seq := 1, uint64(0)
		if delivered, sseq, ok := ackInfo(m.Reply()); ok {
			attempt, seq = int(delivered), sseq
			if prev := r.nacked.Take(seq); prev > 0 {
				attempt = max(attempt, prev+1)
			}
		}
		out = append(out, driver.Received{
			Msg:     decode(m.Headers(), m.Data(), r.stream, seq),
			Attempt: attempt,
			Handle:  &handle{msg: m, seq: seq, attempt: attempt},
			// seq is 0 when the reply subject did not parse: no position.
			Position: seqPosition(seq),
		})
	}
	if err := b.Error(); err != nil && len(out) == 0 {
		return nil, fmt.Errorf("relay/nats: pull request: %w", err)
	}
	return out, nil
}

// Settle acks (+ACK) and nacks (-NAK, with the delay for NackAfter,
// which the server holds) without waiting for the server: nats.go writes
// them out at once, and the connection is ordered, so the server has
// applied them before it reads the next pull request, which is what the
// in-flight window counts on. A settlement the server never gets (the
// connection dropped first) leaves the message to be redelivered after
// ack_wait: at-least-once holds. Release and Close flush, so that the
// server has every settlement when the subscription's channel closes.
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	return r.settle(ctx, batch, false)
}

// settle sends batch and, with flush, waits for the server to have read
// it (one PING/PONG round trip).
func (r *receiver) settle(ctx context.Context, batch []driver.Settle, flush bool) error {
	var errs []error
	for _, s := range batch {
		h := s.Handle.(*handle)
		m := h.msg
		if !s.Ack && h.seq != 0 {
			r.nacked.Remember(h.seq, h.attempt)
		}
		var err error
		switch {
		case s.Ack:
			err = m.Ack()
		case s.Delay > 0:
			err = m.NakWithDelay(s.Delay)
		default:
			err = m.Nak()
		}
		if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			errs = append(errs, err)
		}
	}
	if flush {
		if err := r.flush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("relay/nats: settling %d messages: %w", len(batch), errors.Join(errs...))
	}
	return nil
}

// handle is the settlement token of one delivery.
type handle struct {
	msg     jetstream.Msg
	seq     uint64 // stream sequence; 0 when the metadata was unreadable
	attempt int    // as delivered
}

// Release hands unsettled messages back with an immediate -NAK, so that
// the group receives them at once rather than after ack_wait, and waits
// for the server to have them and every settlement sent before.
func (r *receiver) Release(ctx context.Context, handles []any) error {
	batch := make([]driver.Settle, len(handles))
	for i, h := range handles {
		batch[i] = driver.Settle{Handle: h}
	}
	return r.settle(ctx, batch, true)
}

// Extend implements driver.Extender: +WPI (in progress) resets each
// message's ack_wait timer on the server.
func (r *receiver) Extend(ctx context.Context, handles []any) error {
	var errs []error
	for _, h := range handles {
		if err := h.(*handle).msg.InProgress(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			errs = append(errs, err)
		}
	}
	if err := r.flush(ctx); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("relay/nats: extending %d leases: %w", len(handles), errors.Join(errs...))
	}
	return nil
}

// flush waits for the server to have read everything sent so far (a
// PING/PONG round trip), within ctx.
func (r *receiver) flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	if err := r.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("relay/nats: flush: %w", err)
	}
	return nil
}

// Close waits, within ctx, for the server to have every settlement sent
// (Settle does not wait for it). It has nothing else to end: no pull
// request outlives Receive, and the durable consumer stays for the group.
func (r *receiver) Close(ctx context.Context) error {
	return r.flush(ctx)
}

// seqPosition is the position of the message at stream sequence seq; zero
// for 0 (unknown).
func seqPosition(seq uint64) relay.Position {
	if seq == 0 {
		return relay.Position{}
	}
	return relay.OffsetPosition(int64(seq))
}
