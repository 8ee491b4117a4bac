package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/rowqueue"
)

// historyPage is how many message rows one query of ReadHistory reads.
const historyPage = 1000

// farFuture stands for an open end of a window in the history query.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// ReadHistory implements driver.HistoryDriver: the message rows of topic
// whose created_at is in w, in id order, in pages of 1000. It reads
// without claiming: no delivery row changes.
//
// A message row is kept only while some group of the topic has not
// acknowledged it (see the package doc), so the history is what the
// slowest group still holds: to verify a migration, provision a group
// that nobody consumes before the bridge starts (docs/migration.md), and
// remove it afterwards.
func (d *subDriver) ReadHistory(ctx context.Context, topic string, w relay.Window, fn func(relay.Stored) error) error {
	if err := rowqueue.CheckTopic(topic); err != nil {
		return err
	}
	if err := d.schema.ensure(ctx, d.pool, d.cfg.Schema); err != nil {
		return err
	}
	since, until := w.Since, w.Until
	if since.IsZero() {
		since = time.Unix(0, 0)
	}
	if until.IsZero() {
		until = farFuture
	}
	var last int64
	for {
		rows, err := d.pool.Query(ctx, d.q.history, topic, last, since, until, historyPage)
		if err != nil {
			return fmt.Errorf("relay/postgres: reading the messages of %q: %w", topic, err)
		}
		n := 0
		for rows.Next() {
			var (
				id               int64
				rid, key         string
				mdKeys, mdValues []string
				payload          []byte
				at               time.Time
			)
			if err := rows.Scan(&id, &rid, &key, &mdKeys, &mdValues, &payload, &at); err != nil {
				rows.Close()
				return fmt.Errorf("relay/postgres: reading the messages of %q: %w", topic, err)
			}
			n, last = n+1, id
			m := &relay.Message{ID: rid, Key: key, Metadata: DecodeMetadata(mdKeys, mdValues), Payload: payload}
			if err := fn(relay.Stored{Msg: m, Position: relay.OffsetPosition(id), Time: at}); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("relay/postgres: reading the messages of %q: %w", topic, err)
		}
		if n < historyPage {
			return nil
		}
	}
}
