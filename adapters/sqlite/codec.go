package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"time"

	"github.com/go-relay/relay"
)

// sqliteText names relay's text columns in the errors of
// rowqueue.CheckText.
const sqliteText = "an SQLite text column (or the JSON of the metadata)"

// RawMetadataKey holds the metadata column of a row written by another
// client when it is not a JSON object, so that nothing is dropped.
const RawMetadataKey = "relay-raw-metadata"

// insertMessage and insertDeliveries store one message for every group of
// the topic: the message row, then its delivery rows
// ($1 topic, $2 message row id, $3 visible_at).
const (
	insertMessage = `INSERT INTO relay_messages (topic, relay_id, key, metadata, payload, created_at)
VALUES (?, ?, ?, ?, ?, ?)`
	insertDeliveries = `INSERT INTO relay_deliveries (topic, group_name, message_id, visible_at)
SELECT topic, name, ?2, ?3 FROM relay_groups WHERE topic = ?1`
	hasGroups = `SELECT EXISTS (SELECT 1 FROM relay_groups WHERE topic = ?)`
)

// insert stores msgs for topic's groups in tx; nothing when the topic has
// none (see the package doc). A DeliverAt in the future becomes the
// delivery rows' visible_at.
func insert(ctx context.Context, tx *sql.Tx, topic string, msgs []*relay.Message) error {
	var any bool
	if err := tx.QueryRowContext(ctx, hasGroups, topic).Scan(&any); err != nil || !any {
		return err
	}
	msgStmt, err := tx.PrepareContext(ctx, insertMessage)
	if err != nil {
		return err
	}
	defer msgStmt.Close()
	delStmt, err := tx.PrepareContext(ctx, insertDeliveries)
	if err != nil {
		return err
	}
	defer delStmt.Close()
	now := time.Now().UnixMicro()
	var md bytes.Buffer
	for _, m := range msgs {
		md.Reset()
		if err := encodeMetadata(&md, m.Metadata); err != nil {
			return err
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		res, err := msgStmt.ExecContext(ctx, topic, m.ID, m.Key, md.String(), payload, now)
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		visible := now
		if !m.DeliverAt.IsZero() {
			visible = max(now, (m.DeliverAt.UnixNano()+999)/1000) // never before DeliverAt
		}
		if _, err := delStmt.ExecContext(ctx, topic, id, visible); err != nil {
			return err
		}
	}
	return nil
}

// encodeMetadata writes md as a JSON object of strings ("{}" when empty),
// names in order, without HTML escapes so that the column reads as
// written.
func encodeMetadata(w *bytes.Buffer, md relay.Metadata) error {
	if len(md) == 0 {
		w.WriteString("{}")
		return nil
	}
	e := json.NewEncoder(w)
	e.SetEscapeHTML(false)
	if err := e.Encode(map[string]string(md)); err != nil {
		return err
	}
	w.Truncate(w.Len() - 1) // Encode's newline
	return nil
}

// DecodeMetadata turns the metadata column of a messages row into
// metadata. It never fails, so a row written by any client is delivered:
// a JSON object's string values are taken as they are and other values
// (numbers, booleans, null, objects) as their JSON text; a repeated name
// keeps its last value (as encoding/json does); a column that is not a
// JSON object is kept whole under RawMetadataKey. "", "{}" and "null"
// are no metadata.
func DecodeMetadata(col string) relay.Metadata {
	if col == "" || col == "{}" || col == "null" {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(col), &raw); err != nil {
		return relay.Metadata{RawMetadataKey: col}
	}
	md := make(relay.Metadata, len(raw))
	for k, v := range raw {
		s := string(v)
		if len(v) > 0 && v[0] == '"' {
			_ = json.Unmarshal(v, &s) // a valid JSON string: it decodes
		}
		md[k] = s
	}
	if len(md) == 0 {
		return nil
	}
	return md
}

// decode makes a message of a messages row read from any client: an
// empty relay_id is replaced by the row id in decimal, a NULL key,
// metadata or payload read as empty.
func decode(id int64, rid, key, md sql.NullString, payload []byte) *relay.Message {
	m := &relay.Message{ID: rid.String, Key: key.String, Metadata: DecodeMetadata(md.String), Payload: payload}
	if m.ID == "" {
		m.ID = strconv.FormatInt(id, 10)
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return m
}
