package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// receiver is one subscription: it claims the group's delivery rows of
// one topic under its own lease holder token. A handle is the message
// row's id (int64).
type receiver struct {
	d      *subDriver
	topic  string
	holder string
	wake   chan struct{}

	mu sync.Mutex
	// due are the times at which messages this receiver nacked with a
	// delay become claimable, so that it wakes for them without polling.
	due []time.Time
	// acked are the acks Settle took but did not send: the next claim
	// deletes their rows in its own transaction, before it claims (see
	// Settle). Release or Close sends what is left.
	acked []int64
	// waiting is true while Receive waits for a wake-up, which Settle
	// then sends so that new acks do not wait for the poll period.
	waiting bool
}

func newReceiver(d *subDriver, topic string) *receiver {
	r := &receiver{d: d, topic: topic, holder: relay.NewID(), wake: make(chan struct{}, 1)}
	d.l.add(topic, r.wake)
	return r
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// Receive claims up to max claimable rows in message order. When there
// are none it asks the database when the group's next row becomes
// claimable (a delayed message or a NackAfter falls due, a lease runs
// out) and waits for that, a notification, the next delay of its own
// NackAfter to pass, or the poll period, whichever comes first, and
// claims again.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		out, err := r.claim(ctx, max)
		if err != nil || len(out) > 0 {
			return out, err
		}
		next, err := r.nextDue(ctx)
		if err != nil {
			return nil, err
		}
		wait, acked := r.startWait(next)
		if acked {
			continue // acks came in meanwhile: send them now
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-t.C:
		}
		t.Stop()
		r.mu.Lock()
		r.waiting = false
		r.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// nextDue is how long until the group's next row becomes claimable, or
// the poll period when no row waits (or it is further off).
func (r *receiver) nextDue(ctx context.Context) (time.Duration, error) {
	var us *int64
	if err := r.d.pool.QueryRow(ctx, r.d.q.nextDue, r.topic, r.d.cfg.Group).Scan(&us); err != nil {
		return 0, fmt.Errorf("relay/postgres: looking for the next due message of %q: %w", r.topic, err)
	}
	if us == nil {
		return r.d.cfg.Poll, nil
	}
	// One microsecond more: the claim compares with its own now(), which
	// must have passed the row's visible_at.
	return min(r.d.cfg.Poll, max(0, time.Duration(*us+1)*time.Microsecond)), nil
}

// startWait marks the receiver as waiting and returns how long to wait:
// next (at most the poll period), or less when a delayed nack is due
// sooner. It reports instead that acks are waiting to be sent, and then
// does not mark it.
func (r *receiver) startWait(next time.Duration) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.acked) > 0 {
		return 0, true
	}
	r.waiting = true
	now := time.Now()
	r.due = slices.DeleteFunc(r.due, func(t time.Time) bool { return !t.After(now) })
	wait := next
	for _, t := range r.due {
		wait = min(wait, t.Sub(now))
	}
	return wait, false
}

// takeAcked removes and returns the acks not sent yet.
func (r *receiver) takeAcked() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	acks := r.acked
	r.acked = nil
	return acks
}

// putBack returns acks that could not be sent to the ones waiting.
func (r *receiver) putBack(acks []int64) {
	if len(acks) == 0 {
		return
	}
	r.mu.Lock()
	r.acked = append(acks, r.acked...)
	r.mu.Unlock()
}

// claim sends the waiting acks and claims up to max rows, in one
// transaction sent in one round trip. When it fails, the acks are kept
// for the next attempt.
func (r *receiver) claim(ctx context.Context, max int) ([]driver.Received, error) {
	acks := r.takeAcked()
	b := &pgx.Batch{}
	r.d.q.queueAcks(b, r.topic, r.d.cfg.Group, acks)
	b.Queue(r.d.q.claim, r.topic, r.d.cfg.Group, max, micros(r.d.cfg.Lease), r.holder)
	br := r.d.pool.SendBatch(ctx, b)
	out, err := r.readClaim(br, len(acks))
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("relay/postgres: claiming messages of %q: %w", r.topic, cerr)
	}
	if err != nil {
		// Whether the transaction committed is unknown: the acks are sent
		// again (deleting rows twice is harmless), and rows the claim may
		// have leased come back when their lease runs out.
		r.putBack(acks)
		return nil, err
	}
	return out, nil
}

// readClaim reads the results of the statements claim queued.
func (r *receiver) readClaim(br pgx.BatchResults, acks int) ([]driver.Received, error) {
	if acks > 0 {
		for range ackStatements {
			if _, err := br.Exec(); err != nil {
				return nil, fmt.Errorf("relay/postgres: acknowledging %d messages of %q: %w", acks, r.topic, err)
			}
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("relay/postgres: claiming messages of %q: %w", r.topic, err)
	}
	var out []driver.Received
	for rows.Next() {
		var (
			id               int64
			attempts         int
			rid, key         string
			mdKeys, mdValues []string
			payload          []byte
		)
		if err := rows.Scan(&id, &attempts, &rid, &key, &mdKeys, &mdValues, &payload); err != nil {
			rows.Close()
			return nil, fmt.Errorf("relay/postgres: reading claimed messages of %q: %w", r.topic, err)
		}
		if payload == nil {
			payload = []byte{}
		}
		m := &relay.Message{ID: rid, Key: key, Metadata: DecodeMetadata(mdKeys, mdValues), Payload: payload}
		out = append(out, driver.Received{Msg: m, Attempt: attempts, Handle: id, Position: relay.OffsetPosition(id)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("relay/postgres: claiming messages of %q: %w", r.topic, err)
	}
	return out, nil
}

// Settle deletes the acked delivery rows, removes the message rows no
// group needs any more and makes the nacked rows claimable again (at
// once, or after their delay), all in one transaction sent in one round
// trip (see queries.lock for how concurrent acks of several groups keep
// retention exact).
//
// A batch of acks only is not sent by itself: Settle keeps it and returns,
// the shared layer frees the window slots, and the claim that follows at
// once deletes the rows in its own transaction before it claims new ones
// (waking Receive if it waits). So the window still bounds the rows
// leased to this subscription in the database, and consuming costs one
// transaction per batch instead of two. Release or Close sends the acks
// no claim took.
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	if allAcks(batch) {
		r.mu.Lock()
		for _, s := range batch {
			r.acked = append(r.acked, s.Handle.(int64))
		}
		waiting := r.waiting
		r.mu.Unlock()
		if waiting {
			signal(r.wake)
		}
		return nil
	}
	acks := r.takeAcked()
	var nacks, delays []int64
	var now bool
	var due []time.Time
	for _, s := range batch {
		id := s.Handle.(int64)
		switch {
		case s.Ack:
			acks = append(acks, id)
		default:
			nacks = append(nacks, id)
			delays = append(delays, micros(s.Delay))
			if s.Delay <= 0 {
				now = true
			} else {
				due = append(due, time.Now().Add(s.Delay))
			}
		}
	}
	b := &pgx.Batch{}
	r.d.q.queueAcks(b, r.topic, r.d.cfg.Group, acks)
	if len(nacks) > 0 {
		b.Queue(r.d.q.nack, r.topic, r.d.cfg.Group, nacks, delays, r.holder)
	}
	if now {
		b.Queue(r.d.q.notify, r.d.q.channel, notifyPayload(r.topic))
	}
	if err := r.d.pool.SendBatch(ctx, b).Close(); err != nil {
		r.putBack(acks)
		return fmt.Errorf("relay/postgres: settling %d messages of %q: %w", len(batch)+len(acks), r.topic, err)
	}
	if len(due) > 0 {
		r.mu.Lock()
		r.due = append(r.due, due...)
		r.mu.Unlock()
	}
	if now || len(due) > 0 {
		signal(r.wake)
	}
	return nil
}

// Extend implements driver.Extender: the held rows' leases run for
// another Lease from now.
func (r *receiver) Extend(ctx context.Context, handles []any) error {
	if _, err := r.d.pool.Exec(ctx, r.d.q.extend, r.topic, r.d.cfg.Group, ids(handles), micros(r.d.cfg.Lease), r.holder); err != nil {
		return fmt.Errorf("relay/postgres: extending leases on %q: %w", r.topic, err)
	}
	return nil
}

// Release sends the acks no claim took, makes the unsettled rows
// claimable at once and wakes the group's other subscriptions, in one
// transaction.
func (r *receiver) Release(ctx context.Context, handles []any) error {
	acks := r.takeAcked()
	b := &pgx.Batch{}
	r.d.q.queueAcks(b, r.topic, r.d.cfg.Group, acks)
	b.Queue(r.d.q.release, r.topic, r.d.cfg.Group, ids(handles), r.holder)
	b.Queue(r.d.q.notify, r.d.q.channel, notifyPayload(r.topic))
	if err := r.d.pool.SendBatch(ctx, b).Close(); err != nil {
		r.putBack(acks) // Close tries them once more
		return fmt.Errorf("relay/postgres: releasing %d messages of %q: %w", len(handles), r.topic, err)
	}
	return nil
}

// Close sends the acks no claim or release took (within ctx; when that
// fails their rows are redelivered once their lease runs out) and stops
// waking this receiver.
func (r *receiver) Close(ctx context.Context) error {
	defer r.d.l.remove(r.topic, r.wake)
	acks := r.takeAcked()
	if len(acks) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	r.d.q.queueAcks(b, r.topic, r.d.cfg.Group, acks)
	if err := r.d.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("relay/postgres: acknowledging %d messages of %q: %w", len(acks), r.topic, err)
	}
	return nil
}

func allAcks(batch []driver.Settle) bool {
	for _, s := range batch {
		if !s.Ack {
			return false
		}
	}
	return true
}

func ids(handles []any) []int64 {
	out := make([]int64, len(handles))
	for i, h := range handles {
		out[i] = h.(int64)
	}
	return out
}
