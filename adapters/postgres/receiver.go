package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
)

// table is one subscription's statements (rowqueue.Table): it claims the
// group's delivery rows of one topic under its own lease holder token.
// Each method is one transaction, sent in one round trip.
type table struct {
	d      *subDriver
	topic  string
	holder string
	wake   chan struct{}
}

func newReceiver(d *subDriver, topic string) *rowqueue.Receiver {
	t := &table{d: d, topic: topic, holder: relay.NewID(), wake: make(chan struct{}, 1)}
	d.l.add(topic, t.wake)
	return rowqueue.NewReceiver(t, t.wake, d.cfg.Poll)
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// NextDue asks the database how long until the group's next row becomes
// claimable.
func (t *table) NextDue(ctx context.Context) (time.Duration, bool, error) {
	var us *int64
	if err := t.d.pool.QueryRow(ctx, t.d.q.nextDue, t.topic, t.d.cfg.Group).Scan(&us); err != nil {
		return 0, false, fmt.Errorf("relay/postgres: looking for the next due message of %q: %w", t.topic, err)
	}
	if us == nil {
		return 0, false, nil
	}
	// One microsecond more: the claim compares with its own now(), which
	// must have passed the row's visible_at.
	return time.Duration(*us+1) * time.Microsecond, true, nil
}

// Claim sends the acks and claims up to max rows, in one transaction.
func (t *table) Claim(ctx context.Context, max int, acks []int64) ([]driver.Received, error) {
	b := &pgx.Batch{}
	t.d.q.queueAcks(b, t.topic, t.d.cfg.Group, acks)
	b.Queue(t.d.q.claim, t.topic, t.d.cfg.Group, max, micros(t.d.cfg.Lease), t.holder)
	br := t.d.pool.SendBatch(ctx, b)
	out, err := t.readClaim(br, len(acks))
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("relay/postgres: claiming messages of %q: %w", t.topic, cerr)
	}
	return out, err
}

// readClaim reads the results of the statements claim queued.
func (t *table) readClaim(br pgx.BatchResults, acks int) ([]driver.Received, error) {
	if acks > 0 {
		for range ackStatements {
			if _, err := br.Exec(); err != nil {
				return nil, fmt.Errorf("relay/postgres: acknowledging %d messages of %q: %w", acks, t.topic, err)
			}
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("relay/postgres: claiming messages of %q: %w", t.topic, err)
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
			return nil, fmt.Errorf("relay/postgres: reading claimed messages of %q: %w", t.topic, err)
		}
		if payload == nil {
			payload = []byte{}
		}
		m := &relay.Message{ID: rid, Key: key, Metadata: DecodeMetadata(mdKeys, mdValues), Payload: payload}
		out = append(out, driver.Received{Msg: m, Attempt: attempts, Handle: id, Position: relay.OffsetPosition(id)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("relay/postgres: claiming messages of %q: %w", t.topic, err)
	}
	return out, nil
}

// Settle deletes the acked delivery rows, removes the message rows no
// group needs any more and makes the nacked rows claimable again (at
// once, or after their delay), notifying the group for those due at
// once (see queries.lock for how concurrent acks of several groups keep
// retention exact).
func (t *table) Settle(ctx context.Context, acks []int64, nacks []rowqueue.Nack) error {
	b := &pgx.Batch{}
	t.d.q.queueAcks(b, t.topic, t.d.cfg.Group, acks)
	if len(nacks) > 0 {
		ids, delays := make([]int64, len(nacks)), make([]int64, len(nacks))
		now := false
		for i, n := range nacks {
			ids[i], delays[i] = n.ID, micros(n.Delay)
			now = now || n.Delay <= 0
		}
		b.Queue(t.d.q.nack, t.topic, t.d.cfg.Group, ids, delays, t.holder)
		if now {
			b.Queue(t.d.q.notify, t.d.q.channel, notifyPayload(t.topic))
		}
	}
	if err := t.d.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("relay/postgres: settling %d messages of %q: %w", len(acks)+len(nacks), t.topic, err)
	}
	return nil
}

// Extend makes the held rows' leases run for another Lease from now.
func (t *table) Extend(ctx context.Context, ids []int64) error {
	if _, err := t.d.pool.Exec(ctx, t.d.q.extend, t.topic, t.d.cfg.Group, ids, micros(t.d.cfg.Lease), t.holder); err != nil {
		return fmt.Errorf("relay/postgres: extending leases on %q: %w", t.topic, err)
	}
	return nil
}

// Release sends the acks, makes the unsettled rows claimable at once and
// wakes the group's other subscriptions, in one transaction.
func (t *table) Release(ctx context.Context, acks, ids []int64) error {
	b := &pgx.Batch{}
	t.d.q.queueAcks(b, t.topic, t.d.cfg.Group, acks)
	b.Queue(t.d.q.release, t.topic, t.d.cfg.Group, ids, t.holder)
	b.Queue(t.d.q.notify, t.d.q.channel, notifyPayload(t.topic))
	if err := t.d.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("relay/postgres: releasing %d messages of %q: %w", len(ids), t.topic, err)
	}
	return nil
}

// Close sends the acks and stops waking this subscription.
func (t *table) Close(ctx context.Context, acks []int64) error {
	defer t.d.l.remove(t.topic, t.wake)
	if len(acks) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	t.d.q.queueAcks(b, t.topic, t.d.cfg.Group, acks)
	if err := t.d.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("relay/postgres: acknowledging %d messages of %q: %w", len(acks), t.topic, err)
	}
	return nil
}
