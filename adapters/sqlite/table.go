package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
)

// The statements of a subscription. ?1 topic, ?2 group; a list of row ids
// is one JSON array parameter (json_each), so that each statement is one
// call whatever the count.
const (
	ackRows = `DELETE FROM relay_deliveries WHERE topic = ?1 AND group_name = ?2
AND message_id IN (SELECT value FROM json_each(?3))`
	// The acked messages that no group needs any more; writers take turns,
	// so no other group's ack can run between this and ackRows.
	cleanup = `DELETE FROM relay_messages WHERE id IN (SELECT value FROM json_each(?1))
AND NOT EXISTS (SELECT 1 FROM relay_deliveries d WHERE d.message_id = relay_messages.id)`
	// ?3 now, ?4 limit.
	claimable = `SELECT d.message_id, d.attempts, m.relay_id, m.key, m.metadata, m.payload
FROM relay_deliveries d JOIN relay_messages m ON m.id = d.message_id
WHERE d.topic = ?1 AND d.group_name = ?2 AND d.visible_at <= ?3 ORDER BY d.message_id LIMIT ?4`
	// ?3 ids, ?4 lease end, ?5 holder.
	lease = `UPDATE relay_deliveries SET visible_at = ?4, attempts = attempts + 1, lease_holder = ?5
WHERE topic = ?1 AND group_name = ?2 AND message_id IN (SELECT value FROM json_each(?3))`
	// ?3 now.
	nextDue = `SELECT min(visible_at) FROM relay_deliveries WHERE topic = ?1 AND group_name = ?2 AND visible_at > ?3`
	// ?3 id, ?4 visible_at, ?5 holder.
	nack = `UPDATE relay_deliveries SET visible_at = ?4, lease_holder = NULL
WHERE topic = ?1 AND group_name = ?2 AND message_id = ?3 AND lease_holder = ?5`
	// ?3 ids, ?4 lease end, ?5 holder.
	extend = `UPDATE relay_deliveries SET visible_at = ?4
WHERE topic = ?1 AND group_name = ?2 AND message_id IN (SELECT value FROM json_each(?3)) AND lease_holder = ?5`
	// ?3 ids, ?4 now, ?5 holder.
	release = `UPDATE relay_deliveries SET visible_at = ?4, lease_holder = NULL
WHERE topic = ?1 AND group_name = ?2 AND message_id IN (SELECT value FROM json_each(?3)) AND lease_holder = ?5`
	// ?1 topic, ?2 created before: the oldest messages past MaxAge,
	// with their delivery rows.
	ageDeliveries = `DELETE FROM relay_deliveries WHERE topic = ?1 AND message_id IN (
	SELECT id FROM relay_messages WHERE topic = ?1 AND created_at < ?2 ORDER BY id LIMIT 1000)`
	ageMessages = `DELETE FROM relay_messages WHERE id IN (
	SELECT id FROM relay_messages WHERE topic = ?1 AND created_at < ?2 ORDER BY id LIMIT 1000)`
)

// table is one subscription's statements (rowqueue.Table): it claims the
// group's delivery rows of one topic under its own lease holder token.
// Each method is one transaction.
type table struct {
	d      *subDriver
	topic  string
	holder string
	wake   chan struct{}
	// sweptAt is when the MaxAge sweep last ran (only Claim reads it).
	sweptAt time.Time
}

func newReceiver(d *subDriver, topic string) *rowqueue.Receiver {
	t := &table{d: d, topic: topic, holder: relay.NewID(), wake: make(chan struct{}, 1)}
	d.s.waiters.Add(topic, t.wake)
	return rowqueue.NewReceiver(t, t.wake, d.cfg.Poll)
}

// idList is ids as the JSON array the statements take.
func idList(ids []int64) string {
	b := make([]byte, 0, 1+len(ids)*8)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

// ack deletes the rows of acks and the messages no group needs any more.
func (t *table) ack(ctx context.Context, tx *sql.Tx, acks []int64) error {
	if len(acks) == 0 {
		return nil
	}
	list := idList(acks)
	if _, err := tx.ExecContext(ctx, ackRows, t.topic, t.d.cfg.Group, list); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, cleanup, list)
	return err
}

// Claim sends the acks, sweeps messages past MaxAge when due, and leases
// up to max claimable rows, in one transaction.
func (t *table) Claim(ctx context.Context, max int, acks []int64) ([]driver.Received, error) {
	var out []driver.Received
	err := t.d.s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := t.ack(ctx, tx, acks); err != nil {
			return err
		}
		now := time.Now()
		if err := t.sweep(ctx, tx, now); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, claimable, t.topic, t.d.cfg.Group, now.UnixMicro(), max)
		if err != nil {
			return err
		}
		defer rows.Close()
		ids := make([]int64, 0, max)
		for rows.Next() {
			var (
				id, attempts int64
				rid, key, md sql.NullString
				payload      []byte
			)
			if err := rows.Scan(&id, &attempts, &rid, &key, &md, &payload); err != nil {
				return err
			}
			ids = append(ids, id)
			out = append(out, driver.Received{Msg: decode(id, rid, key, md, payload), Attempt: int(attempts + 1),
				Handle: id, Position: relay.OffsetPosition(id)})
		}
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, lease, t.topic, t.d.cfg.Group, idList(ids), now.Add(t.d.cfg.Lease).UnixMicro(), t.holder)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("relay/sqlite: claiming messages of %q: %w", t.topic, err)
	}
	return out, nil
}

// sweep deletes up to 1000 of the topic's messages older than MaxAge,
// when set and not done within MaxAge/10 (between 1s and 1m).
func (t *table) sweep(ctx context.Context, tx *sql.Tx, now time.Time) error {
	age := t.d.cfg.MaxAge
	if age <= 0 || now.Sub(t.sweptAt) < min(max(age/10, time.Second), time.Minute) {
		return nil
	}
	before := now.Add(-age).UnixMicro()
	if _, err := tx.ExecContext(ctx, ageDeliveries, t.topic, before); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, ageMessages, t.topic, before); err != nil {
		return err
	}
	t.sweptAt = now
	return nil
}

// NextDue asks when the group's next row becomes claimable.
func (t *table) NextDue(ctx context.Context) (time.Duration, bool, error) {
	now := time.Now()
	var us sql.NullInt64
	if err := t.d.s.r.QueryRowContext(ctx, nextDue, t.topic, t.d.cfg.Group, now.UnixMicro()).Scan(&us); err != nil {
		return 0, false, fmt.Errorf("relay/sqlite: looking for the next due message of %q: %w", t.topic, err)
	}
	if !us.Valid {
		return 0, false, nil
	}
	return time.UnixMicro(us.Int64).Sub(now) + time.Microsecond, true, nil
}

// Settle deletes the acked rows and makes the nacked ones claimable
// after their delays, waking the process's subscriptions of the topic
// for those due at once.
func (t *table) Settle(ctx context.Context, acks []int64, nacks []rowqueue.Nack) error {
	wake := false
	err := t.d.s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := t.ack(ctx, tx, acks); err != nil {
			return err
		}
		now := time.Now()
		for _, n := range nacks {
			wake = wake || n.Delay <= 0
			if _, err := tx.ExecContext(ctx, nack, t.topic, t.d.cfg.Group, n.ID, now.Add(n.Delay).UnixMicro(), t.holder); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("relay/sqlite: settling %d messages of %q: %w", len(acks)+len(nacks), t.topic, err)
	}
	if wake {
		t.d.s.waiters.Wake(t.topic)
	}
	return nil
}

// Extend makes the held rows' leases run for another Lease from now.
func (t *table) Extend(ctx context.Context, ids []int64) error {
	until := time.Now().Add(t.d.cfg.Lease).UnixMicro()
	if _, err := t.d.s.w.ExecContext(ctx, extend, t.topic, t.d.cfg.Group, idList(ids), until, t.holder); err != nil {
		return fmt.Errorf("relay/sqlite: extending leases on %q: %w", t.topic, err)
	}
	return nil
}

// Release sends the acks and makes the unsettled rows claimable at once,
// in one transaction, and wakes the process's other subscriptions.
func (t *table) Release(ctx context.Context, acks, ids []int64) error {
	err := t.d.s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := t.ack(ctx, tx, acks); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, release, t.topic, t.d.cfg.Group, idList(ids), time.Now().UnixMicro(), t.holder)
		return err
	})
	if err != nil {
		return fmt.Errorf("relay/sqlite: releasing %d messages of %q: %w", len(ids), t.topic, err)
	}
	t.d.s.waiters.Wake(t.topic)
	return nil
}

// Close sends the acks and stops waking this subscription.
func (t *table) Close(ctx context.Context, acks []int64) error {
	defer t.d.s.waiters.Remove(t.topic, t.wake)
	if len(acks) == 0 {
		return nil
	}
	if err := t.d.s.write(ctx, func(ctx context.Context, tx *sql.Tx) error { return t.ack(ctx, tx, acks) }); err != nil {
		return fmt.Errorf("relay/sqlite: acknowledging %d messages of %q: %w", len(acks), t.topic, err)
	}
	return nil
}
