package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/rowqueue"
)

const (
	createGroup = `INSERT OR IGNORE INTO relay_groups (topic, name, created_at) VALUES (?, ?, ?)`
	countLag    = `SELECT count(*) FROM relay_deliveries WHERE topic = ? AND group_name = ?`
	// One page of ReadHistory: ?1 topic, ?2 after id, ?3 since, ?4 until
	// (microseconds), ?5 limit.
	historyPage = `SELECT id, relay_id, key, metadata, payload, created_at FROM relay_messages
WHERE topic = ?1 AND id > ?2 AND created_at >= ?3 AND created_at < ?4 ORDER BY id LIMIT ?5`
)

// historyRows is how many message rows one page of ReadHistory reads.
const historyRows = 1000

// NewSubscriber returns a subscriber for cfg.Group on the database file
// cfg.Path, created with relay's tables when missing. ctx bounds opening
// it. The subscriber is safe for concurrent use and implements
// relay.Provisioner, relay.LagReporter and relay.HistoryReader.
func NewSubscriber(ctx context.Context, cfg SubscriberConfig) (relay.Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	s, err := openStore(ctx, cfg.File)
	if err != nil {
		return nil, err
	}
	d := &subDriver{s: s, cfg: cfg, caps: capabilities(DefaultMaxBytes)}
	window, maxWindow := driver.AdaptiveWindow(cfg.InFlight, DefaultInFlight)
	return driver.NewSubscriber(d, rowqueue.Options(cfg.Group, window, maxWindow, cfg.InFlightBytes, cfg.Lease, cfg.Logger)), nil
}

type subDriver struct {
	s    *store
	cfg  SubscriberConfig
	caps relay.Capabilities
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

// Provision implements driver.ProvisionDriver: it creates the group's row
// for topic, so that every message published to topic from now on gets a
// delivery row for the group. Idempotent.
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	if err := rowqueue.CheckTopic(topic); err != nil {
		return err
	}
	if _, err := d.s.w.ExecContext(ctx, createGroup, topic, d.cfg.Group, time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("relay/sqlite: creating group %q of topic %q: %w", d.cfg.Group, topic, err)
	}
	return nil
}

// Subscribe implements driver.SubscribeDriver: it provisions the group
// and starts a receiver.
func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	if err := d.Provision(ctx, topic); err != nil {
		return nil, err
	}
	return newReceiver(d, topic), nil
}

// Lag implements driver.LagDriver: the delivery rows of topic the group
// has not acknowledged, claimed or not, including those waiting out a
// delay. A group that does not exist yet counts 0.
func (d *subDriver) Lag(ctx context.Context, topic string) (int64, error) {
	var n int64
	if err := d.s.r.QueryRowContext(ctx, countLag, topic, d.cfg.Group).Scan(&n); err != nil {
		return 0, fmt.Errorf("relay/sqlite: counting the lag of group %q on %q: %w", d.cfg.Group, topic, err)
	}
	return n, nil
}

// ReadHistory implements driver.HistoryDriver: the message rows of topic
// whose created_at is in w, in id order, read in pages of 1000 without
// claiming anything. A message row is kept only while some group of the
// topic has not acknowledged it (and MaxAge did not remove it), so the
// history is what the slowest group still holds.
func (d *subDriver) ReadHistory(ctx context.Context, topic string, w relay.Window, fn func(relay.Stored) error) error {
	if err := rowqueue.CheckTopic(topic); err != nil {
		return err
	}
	since, until := int64(0), int64(1<<63-1)
	if !w.Since.IsZero() {
		since = w.Since.UnixMicro()
	}
	if !w.Until.IsZero() {
		until = w.Until.UnixMicro()
	}
	for last, n := int64(0), historyRows; n == historyRows; {
		var err error
		if last, n, err = d.historyPage(ctx, topic, last, since, until, fn); err != nil {
			return err
		}
	}
	return nil
}

// historyPage passes to fn the rows of one page after id last, and
// returns the last id read and how many rows it read.
func (d *subDriver) historyPage(ctx context.Context, topic string, last, since, until int64, fn func(relay.Stored) error) (int64, int, error) {
	rows, err := d.s.r.QueryContext(ctx, historyPage, topic, last, since, until, historyRows)
	if err != nil {
		return 0, 0, fmt.Errorf("relay/sqlite: reading the messages of %q: %w", topic, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			id, at       int64
			rid, key, md sql.NullString
			payload      []byte
		)
		if err := rows.Scan(&id, &rid, &key, &md, &payload, &at); err != nil {
			return 0, 0, fmt.Errorf("relay/sqlite: reading the messages of %q: %w", topic, err)
		}
		n, last = n+1, id
		if err := fn(relay.Stored{Msg: decode(id, rid, key, md, payload), Position: relay.OffsetPosition(id), Time: time.UnixMicro(at)}); err != nil {
			return 0, 0, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("relay/sqlite: reading the messages of %q: %w", topic, err)
	}
	return last, n, nil
}

// RemoveTopic implements driver.RemoveTopicDriver: it deletes every
// group, delivery and message row of topic, in one transaction.
// Idempotent.
func (d *subDriver) RemoveTopic(ctx context.Context, topic string) error {
	if err := rowqueue.CheckTopic(topic); err != nil {
		return err
	}
	err := d.s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, table := range []string{"relay_groups", "relay_deliveries", "relay_messages"} {
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+table+" WHERE topic = ?", topic); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("relay/sqlite: removing topic %q: %w", topic, err)
	}
	return nil
}

// Close releases the file.
func (d *subDriver) Close() error {
	d.s.release()
	return nil
}
