package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-relay/relay"
)

// historyPage is how many entries one XRANGE of ReadHistory returns.
const historyPage = 1000

// ReadHistory implements driver.HistoryDriver: the entries of topic's
// stream whose entry-ID time is in w, read with XRANGE in pages of 1000,
// in stream order. XRANGE changes no group's state (last-delivered ID,
// pending list). Entries trimmed or deleted are not read; a stream that
// does not exist reads as empty. Stored.Time is the millisecond of the
// entry ID, which is the server's clock at XADD for IDs the server made.
func (d *subDriver) ReadHistory(ctx context.Context, topic string, w relay.Window, fn func(relay.Stored) error) error {
	key := d.cfg.Prefix + topic
	start, end := "-", "+"
	if !w.Since.IsZero() {
		start = strconv.FormatInt(max(0, w.Since.UnixMilli()), 10)
	}
	if !w.Until.IsZero() {
		ms := w.Until.UnixMilli()
		if w.Until.Sub(time.UnixMilli(ms)) == 0 {
			ms-- // Until is exclusive: its millisecond is not read
		}
		if ms < 0 {
			return nil
		}
		end = strconv.FormatInt(ms, 10)
	}
	for {
		raw, err := d.c.Do(ctx, "XRANGE", key, start, end, "COUNT", historyPage).Slice()
		if err != nil {
			return fmt.Errorf("relay/redis: reading stream %q: %w", key, err)
		}
		last := ""
		for _, e := range raw {
			id, fields, ok := rangeEntry(e)
			if !ok {
				return fmt.Errorf("relay/redis: XRANGE of stream %q answered an entry of an unknown shape", key)
			}
			last = id
			ms, _, _ := strings.Cut(id, "-")
			t, _ := strconv.ParseInt(ms, 10, 64)
			if err := fn(relay.Stored{Msg: DecodeFields(id, fields), Position: relay.EntryPosition(id), Time: time.UnixMilli(t)}); err != nil {
				return err
			}
		}
		if len(raw) < historyPage {
			return nil
		}
		start = "(" + last // exclusive ranges: Redis 6.2 and newer
	}
}

// rangeEntry reads one entry of an XRANGE reply: its ID and its fields
// in entry order.
func rangeEntry(e any) (string, []string, bool) {
	pair, ok := e.([]any)
	if !ok || len(pair) != 2 {
		return "", nil, false
	}
	id, ok := pair[0].(string)
	if !ok {
		return "", nil, false
	}
	raw, ok := pair[1].([]any)
	if !ok {
		return id, nil, pair[1] == nil
	}
	fields := make([]string, len(raw))
	for i, f := range raw {
		fields[i] = str(f)
	}
	return id, fields, true
}
