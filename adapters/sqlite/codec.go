package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
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

// insertMessage and insertDeliveries store messages for every group of
// their topic: the message rows, one by one, then the delivery rows of
// the batch in one statement (?1 topic, ?2 and ?3 the first and last
// message row ids; ids are consecutive, since the transaction holds the
// write lock). deliver_at (0: at once) is the delivery rows' first
// visible_at. insertDeliveriesFor is insertDeliveries for one group (?4).
const (
	insertMessage = `INSERT INTO relay_messages (topic, relay_id, key, metadata, payload, created_at, deliver_at)
VALUES (?, ?, ?, ?, ?, ?, ?)`
	insertDeliveries = `INSERT INTO relay_deliveries (topic, group_name, message_id, visible_at)
SELECT m.topic, g.name, m.id, m.deliver_at FROM relay_messages m JOIN relay_groups g ON g.topic = m.topic
WHERE m.id BETWEEN ?2 AND ?3 AND m.topic = ?1`
	insertDeliveriesFor = `INSERT INTO relay_deliveries (topic, group_name, message_id, visible_at)
SELECT m.topic, ?4, m.id, m.deliver_at FROM relay_messages m WHERE m.id BETWEEN ?2 AND ?3 AND m.topic = ?1`
	hasGroups   = `SELECT EXISTS (SELECT 1 FROM relay_groups WHERE topic = ?)`
	groupExists = `SELECT EXISTS (SELECT 1 FROM relay_groups WHERE topic = ? AND name = ?)`
)

// insert stores msgs in tx for topic's groups, or for group alone when
// not "". Nothing is stored for a topic without groups (see the package
// doc); a group that does not exist is a *relay.NoGroupError. A DeliverAt
// in the future becomes the delivery rows' visible_at.
func insert(ctx context.Context, tx *sql.Tx, topic, group string, msgs []*relay.Message) error {
	var exists bool
	var err error
	if group == "" {
		err = tx.QueryRowContext(ctx, hasGroups, topic).Scan(&exists)
	} else if err = tx.QueryRowContext(ctx, groupExists, topic, group).Scan(&exists); err == nil && !exists {
		return &relay.NoGroupError{Backend: "sqlite", Topic: topic, Group: group, Detail: "no row for it in relay_groups"}
	}
	if err != nil || !exists {
		return err
	}
	stmt, err := tx.PrepareContext(ctx, insertMessage)
	if err != nil {
		return err
	}
	defer stmt.Close()
	now := time.Now().UnixMicro()
	var md bytes.Buffer
	var first, last int64
	for i, m := range msgs {
		md.Reset()
		if err := encodeMetadata(&md, m.Metadata); err != nil {
			return err
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		var due int64
		if !m.DeliverAt.IsZero() {
			due = max(0, (m.DeliverAt.UnixNano()+999)/1000) // never before DeliverAt
		}
		res, err := stmt.ExecContext(ctx, topic, m.ID, m.Key, md.String(), payload, now, due)
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
	if last-first != int64(len(msgs)-1) {
		return fmt.Errorf("message row ids %d..%d for %d messages: another writer in the transaction", first, last, len(msgs))
	}
	if group != "" {
		_, err = tx.ExecContext(ctx, insertDeliveriesFor, topic, first, last, group)
	} else {
		_, err = tx.ExecContext(ctx, insertDeliveries, topic, first, last)
	}
	return err
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
