package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// receiver is one subscription: pull requests on the group's durable
// consumer of one topic (see puller).
type receiver struct {
	pull   *puller
	nc     *natsgo.Conn
	stream string
	// window is the most the subscription's window may be: half the
	// consumer's max_ack_pending (see WindowLimit); 0 when it has none.
	window int
	out    []driver.Received // reused from call to call

	// nacked remembers, by stream sequence, the attempt of each message
	// this subscription nacked, so that its redelivery here counts at
	// least one more even when the server rolled a delivery back (it
	// lowers a message's delivery count when it took a delivery back from
	// a pull request that ended).
	nacked driver.AttemptMemo[uint64]
}

// WindowLimit implements driver.WindowLimiter.
func (r *receiver) WindowLimit() int { return r.window }

// Receive returns what the subscription's pull requests brought, as soon
// as there is any (see puller): between 1 and max messages, or none when
// a request ended empty after fetch_wait. It never has requests out for
// more than max, so the consumer's unacknowledged messages stay within
// the shared layer's window, which WindowLimit keeps at half the
// consumer's max_ack_pending or less.
//
// When the subscription ends, Release or Close ends the inbox
// subscription (see puller.stop) before anything is released: a live
// request would take a released message again.
func (r *receiver) Receive(ctx context.Context, limit int) ([]driver.Received, error) {
	msgs, err := r.pull.next(ctx, limit)
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	out := r.out[:0]
	for _, m := range msgs {
		attempt, seq := 1, uint64(0)
		if delivered, sseq, ok := ackInfo(m.Reply); ok {
			attempt, seq = int(delivered), sseq
			if prev := r.nacked.Take(seq); prev > 0 {
				attempt = max(attempt, prev+1)
			}
		}
		out = append(out, driver.Received{
			Msg:     decode(m.Header, m.Data, r.stream, seq),
			Attempt: attempt,
			Handle:  &handle{msg: m, seq: seq, attempt: attempt},
			// seq is 0 when the reply subject did not parse: no position.
			Position: seqPosition(seq),
		})
	}
	r.out = out
	return out, nil
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
		if err != nil && !errors.Is(err, natsgo.ErrMsgAlreadyAckd) {
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
	msg     *natsgo.Msg
	seq     uint64 // stream sequence; 0 when the metadata was unreadable
	attempt int    // as delivered
}

// Release hands unsettled messages back with an immediate -NAK, so that
// the group receives them at once rather than after ack_wait, and waits
// for the server to have them and every settlement sent before. It first
// waits for the subscription's live pull requests to end (see
// puller.stop), which would take the released messages again, and
// releases what they brought too.
func (r *receiver) Release(ctx context.Context, handles []any) error {
	batch := make([]driver.Settle, len(handles))
	for i, h := range handles {
		batch[i] = driver.Settle{Handle: h}
	}
	var errs []error
	if err := r.releaseUnseen(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := r.settle(ctx, batch, true); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// releaseUnseen ends the inbox subscription and -NAKs what arrived that
// Receive never returned, without counting it as a nack of this
// subscription (nobody saw it). Idempotent.
func (r *receiver) releaseUnseen(ctx context.Context) error {
	kept, err := r.pull.stop(ctx)
	errs := []error{err}
	for _, m := range kept {
		if err := m.Nak(); err != nil && !errors.Is(err, natsgo.ErrMsgAlreadyAckd) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Extend implements driver.Extender: +WPI (in progress) resets each
// message's ack_wait timer on the server.
func (r *receiver) Extend(ctx context.Context, handles []any) error {
	var errs []error
	for _, h := range handles {
		if err := h.(*handle).msg.InProgress(); err != nil && !errors.Is(err, natsgo.ErrMsgAlreadyAckd) {
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
	if err := flushConn(ctx, r.nc); err != nil {
		return fmt.Errorf("relay/nats: flush: %w", err)
	}
	return nil
}

// flushConn is nc.FlushWithContext within ctx, or within 10s when ctx
// has no deadline (nats.go requires one).
func flushConn(ctx context.Context, nc *natsgo.Conn) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return nc.FlushWithContext(ctx)
}

// Close ends the inbox subscription (releasing what arrived unseen) and
// waits, within ctx, for the server to have every settlement sent
// (Settle does not wait for it). The durable consumer stays for the
// group.
func (r *receiver) Close(ctx context.Context) error {
	return errors.Join(r.releaseUnseen(ctx), r.flush(ctx))
}

// seqPosition is the position of the message at stream sequence seq; zero
// for 0 (unknown).
func seqPosition(seq uint64) relay.Position {
	if seq == 0 {
		return relay.Position{}
	}
	return relay.OffsetPosition(int64(seq))
}
