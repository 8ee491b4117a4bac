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
}

func newReceiver(d *subDriver, topic string) *receiver {
	r := &receiver{d: d, topic: topic, holder: relay.NewID(), wake: make(chan struct{}, 1)}
	d.l.add(topic, r.wake)
	return r
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// Receive claims up to max claimable rows in message order. When there
// are none it waits for a notification, the next delay of its own
// NackAfter to pass, or the poll period, and claims again.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		out, err := r.claim(ctx, max)
		if err != nil || len(out) > 0 {
			return out, err
		}
		t := time.NewTimer(r.nextWait())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-r.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// nextWait is the poll period, or less when a delayed nack is due sooner.
func (r *receiver) nextWait() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.due = slices.DeleteFunc(r.due, func(t time.Time) bool { return !t.After(now) })
	wait := r.d.cfg.Poll
	for _, t := range r.due {
		wait = min(wait, t.Sub(now))
	}
	return wait
}

func (r *receiver) claim(ctx context.Context, max int) ([]driver.Received, error) {
	rows, err := r.d.pool.Query(ctx, r.d.q.claim, r.topic, r.d.cfg.Group, max, micros(r.d.cfg.Lease), r.holder)
	if err != nil {
		return nil, fmt.Errorf("postgres: claiming messages of %q: %w", r.topic, err)
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
			return nil, fmt.Errorf("postgres: reading claimed messages of %q: %w", r.topic, err)
		}
		if payload == nil {
			payload = []byte{}
		}
		m := &relay.Message{ID: rid, Key: key, Metadata: DecodeMetadata(mdKeys, mdValues), Payload: payload}
		out = append(out, driver.Received{Msg: m, Attempt: attempts, Handle: id})
	}
	if err := rows.Err(); err != nil {
		// Whether the claim committed is unknown: rows it may have leased
		// come back when their lease runs out.
		return nil, fmt.Errorf("postgres: claiming messages of %q: %w", r.topic, err)
	}
	return out, nil
}

// Settle deletes the acked delivery rows, removes the message rows no
// group needs any more and makes the nacked rows claimable again (at
// once, or after their delay), all in one transaction sent in one round
// trip (see queries.lock for how concurrent acks of several groups keep
// retention exact).
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	var acks, nacks, delays []int64
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
	if len(acks) > 0 {
		b.Queue(r.d.q.lock, acks)
		b.Queue(r.d.q.ack, r.topic, r.d.cfg.Group, acks)
		b.Queue(r.d.q.cleanup, acks)
	}
	if len(nacks) > 0 {
		b.Queue(r.d.q.nack, r.topic, r.d.cfg.Group, nacks, delays, r.holder)
	}
	if now {
		b.Queue(r.d.q.notify, r.d.q.channel, notifyPayload(r.topic))
	}
	if err := r.d.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("postgres: settling %d messages of %q: %w", len(batch), r.topic, err)
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
		return fmt.Errorf("postgres: extending leases on %q: %w", r.topic, err)
	}
	return nil
}

// Release makes the unsettled rows claimable at once and wakes the
// group's other subscriptions.
func (r *receiver) Release(ctx context.Context, handles []any) error {
	b := &pgx.Batch{}
	b.Queue(r.d.q.release, r.topic, r.d.cfg.Group, ids(handles), r.holder)
	b.Queue(r.d.q.notify, r.d.q.channel, notifyPayload(r.topic))
	if err := r.d.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("postgres: releasing %d messages of %q: %w", len(handles), r.topic, err)
	}
	return nil
}

// Close stops waking this receiver. It makes no broker call.
func (r *receiver) Close(context.Context) error {
	r.d.l.remove(r.topic, r.wake)
	return nil
}

func ids(handles []any) []int64 {
	out := make([]int64, len(handles))
	for i, h := range handles {
		out[i] = h.(int64)
	}
	return out
}
