package relaytest

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/go-relay/relay"
)

// SQLiteRaw is what a hand-written database/sql program does on relay's
// SQLite tables (adapters/sqlite, docs/sqlite.md) with the adapter's
// statements: the baseline of the sqlite:// benchmarks. DB is opened by
// the caller on the file (modernc.org/sqlite, WAL, _txlock=immediate, one
// connection), after relay created the tables.
type SQLiteRaw struct{ DB *sql.DB }

// The statements, as the adapter runs them.
const (
	rawSQLiteGroup    = `INSERT OR IGNORE INTO relay_groups (topic, name, created_at) VALUES (?, ?, 0)`
	rawSQLiteMessage  = `INSERT INTO relay_messages (topic, relay_id, key, metadata, payload, created_at, deliver_at) VALUES (?, ?, '', '{}', ?, ?, 0)`
	rawSQLiteDelivery = `INSERT INTO relay_deliveries (topic, group_name, message_id, visible_at)
SELECT m.topic, g.name, m.id, m.deliver_at FROM relay_messages m JOIN relay_groups g ON g.topic = m.topic
WHERE m.id BETWEEN ?2 AND ?3 AND m.topic = ?1`
	rawSQLiteClaim = `SELECT d.message_id, d.attempts, m.relay_id, m.key, m.metadata, m.payload
FROM relay_deliveries d JOIN relay_messages m ON m.id = d.message_id
WHERE d.topic = ?1 AND d.group_name = ?2 AND d.visible_at <= ?3 ORDER BY d.message_id LIMIT ?4`
	rawSQLiteLease = `UPDATE relay_deliveries SET visible_at = ?4, attempts = attempts + 1, lease_holder = 'raw'
WHERE topic = ?1 AND group_name = ?2 AND message_id IN (SELECT value FROM json_each(?3))`
	rawSQLiteAck     = `DELETE FROM relay_deliveries WHERE topic = ?1 AND group_name = ?2 AND message_id IN (SELECT value FROM json_each(?3))`
	rawSQLiteCleanup = `DELETE FROM relay_messages WHERE id IN (SELECT value FROM json_each(?1))
AND NOT EXISTS (SELECT 1 FROM relay_deliveries d WHERE d.message_id = relay_messages.id)`
)

// AddGroup creates the group of topic.
func (r SQLiteRaw) AddGroup(topic, group string) error {
	_, err := r.DB.Exec(rawSQLiteGroup, topic, group)
	return err
}

func (r SQLiteRaw) inTx(fn func(tx *sql.Tx) error) error {
	tx, err := r.DB.Begin()
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Publish stores n messages of payload for topic's groups in one
// transaction: the message rows one by one, then their delivery rows in
// one statement.
func (r SQLiteRaw) Publish(topic string, n int, payload []byte) error {
	return r.inTx(func(tx *sql.Tx) error {
		msg, err := tx.Prepare(rawSQLiteMessage)
		if err != nil {
			return err
		}
		defer msg.Close()
		now := time.Now().UnixMicro()
		var first, last int64
		for i := range n {
			res, err := msg.Exec(topic, relay.NewID(), payload, now)
			if err != nil {
				return err
			}
			if last, err = res.LastInsertId(); err != nil {
				return err
			}
			if i == 0 {
				first = last
			}
		}
		_, err = tx.Exec(rawSQLiteDelivery, topic, first, last)
		return err
	})
}

// ClaimAcking deletes the rows of acked (and the messages no group needs)
// and leases up to max claimable rows of group, in one transaction, as
// the adapter's claim does; it returns the row ids claimed.
func (r SQLiteRaw) ClaimAcking(topic, group string, acked []int64, max int) ([]int64, error) {
	var ids []int64
	err := r.inTx(func(tx *sql.Tx) error {
		if len(acked) > 0 {
			list := jsonIDs(acked)
			if _, err := tx.Exec(rawSQLiteAck, topic, group, list); err != nil {
				return err
			}
			if _, err := tx.Exec(rawSQLiteCleanup, list); err != nil {
				return err
			}
		}
		if max <= 0 {
			return nil
		}
		now := time.Now()
		rows, err := tx.Query(rawSQLiteClaim, topic, group, now.UnixMicro(), max)
		if err != nil {
			return err
		}
		defer rows.Close()
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
		}
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		_, err = tx.Exec(rawSQLiteLease, topic, group, jsonIDs(ids), now.Add(30*time.Second).UnixMicro())
		return err
	})
	return ids, err
}

// Drain claims and acks n messages of group with a window of window rows
// per transaction, the ack of one window going with the next claim. It
// returns when n were claimed and acked, or with the first error; ctx is
// checked between transactions.
func (r SQLiteRaw) Drain(ctx context.Context, topic, group string, n, window int) error {
	var acked []int64
	for got := 0; got < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		ids, err := r.ClaimAcking(topic, group, acked, window)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			time.Sleep(time.Millisecond) // not published yet
		}
		acked, got = ids, got+len(ids)
	}
	_, err := r.ClaimAcking(topic, group, acked, 0)
	return err
}

func jsonIDs(ids []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte(']')
	return b.String()
}
