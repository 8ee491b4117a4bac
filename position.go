package relay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-relay/relay/internal/deliveryhook"
)

// Position is where a delivered message is kept in its source, in the
// broker's own coordinates: a Kafka partition and offset, a Redis stream
// entry ID, a NATS JetStream stream sequence, a PostgreSQL message row id.
// A backend whose deliveries have no lasting coordinate (a RabbitMQ
// delivery tag numbers a channel's deliveries, an SQS receipt handle one
// receive) gives the zero Position. Positions are comparable within one
// topic (and for Kafka one partition): a later message has a greater
// Offset, or a greater Entry in stream-ID order.
//
// A Position is a small value, filled by the adapter without allocating;
// String formats it only when asked.
type Position struct{ p deliveryhook.Position }

const (
	posNone      = deliveryhook.PosNone
	posOffset    = deliveryhook.PosOffset
	posPartition = deliveryhook.PosPartition
	posEntry     = deliveryhook.PosEntry
)

// OffsetPosition is the position of a message numbered by seq in its
// topic: a NATS stream sequence, a PostgreSQL row id.
func OffsetPosition(seq int64) Position {
	return Position{deliveryhook.Position{Kind: posOffset, Offset: seq}}
}

// PartitionPosition is the position of a message at offset in partition
// of its topic (Kafka).
func PartitionPosition(partition int32, offset int64) Position {
	return Position{deliveryhook.Position{Kind: posPartition, Partition: partition, Offset: offset}}
}

// EntryPosition is the position of a message named by an entry ID in its
// topic (a Redis stream entry ID, "<ms>-<seq>").
func EntryPosition(id string) Position {
	return Position{deliveryhook.Position{Kind: posEntry, Entry: id}}
}

// IsZero reports whether p is the zero Position: the backend has none.
func (p Position) IsZero() bool { return p.p.Kind == posNone }

// Partition returns the Kafka partition and true for a PartitionPosition.
func (p Position) Partition() (int32, bool) { return p.p.Partition, p.p.Kind == posPartition }

// Offset is the offset of a PartitionPosition or the sequence of an
// OffsetPosition; 0 otherwise.
func (p Position) Offset() int64 { return p.p.Offset }

// Entry is the entry ID of an EntryPosition; "" otherwise.
func (p Position) Entry() string { return p.p.Entry }

// String formats p as ParsePosition reads it: "PARTITION:OFFSET" for a
// PartitionPosition, the sequence for an OffsetPosition, the entry ID for
// an EntryPosition, "" for the zero Position.
func (p Position) String() string {
	switch p.p.Kind {
	case posOffset:
		return strconv.FormatInt(p.p.Offset, 10)
	case posPartition:
		return strconv.FormatInt(int64(p.p.Partition), 10) + ":" + strconv.FormatInt(p.p.Offset, 10)
	case posEntry:
		return p.p.Entry
	}
	return ""
}

// ParsePosition reads what Position.String wrote: "P:O" is a
// PartitionPosition, a decimal number an OffsetPosition, anything else
// containing '-' an EntryPosition, "" the zero Position.
func ParsePosition(s string) (Position, error) {
	if s == "" {
		return Position{}, nil
	}
	if p, o, ok := strings.Cut(s, ":"); ok {
		pn, err1 := strconv.ParseInt(p, 10, 32)
		on, err2 := strconv.ParseInt(o, 10, 64)
		if err1 != nil || err2 != nil || pn < 0 || on < 0 {
			return Position{}, fmt.Errorf("relay: position %q: want PARTITION:OFFSET", s)
		}
		return PartitionPosition(int32(pn), on), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return OffsetPosition(n), nil
	}
	if strings.Contains(s, "-") {
		return EntryPosition(s), nil
	}
	return Position{}, fmt.Errorf("relay: position %q: not a partition:offset, a sequence or an entry ID", s)
}

// Position is where the message is kept in the source it was delivered
// from (see Position); the zero Position for a message that was not
// delivered or whose backend has no lasting coordinates.
func (m *Message) Position() Position {
	if m.d == nil {
		return Position{}
	}
	return Position{m.d.pos}
}

// SourceKey is the metadata key in which a bridge route that writes
// source positions (docs/migration.md) records where the forwarded
// message was kept in its source: "BACKEND:TOPIC@POSITION", for example
// "kafka:orders@3:1042" or "redis:orders@1700000000000-0".
const SourceKey = "relay-source"

// FormatSource is the value of SourceKey for a message of topic at pos on
// backend (Capabilities.Backend).
func FormatSource(backend, topic string, pos Position) string {
	return backend + ":" + topic + "@" + pos.String()
}

// ParseSource reads a value of SourceKey.
func ParseSource(v string) (backend, topic string, pos Position, err error) {
	b, rest, ok := strings.Cut(v, ":")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 {
		return "", "", Position{}, fmt.Errorf("relay: %s %q: want BACKEND:TOPIC@POSITION", SourceKey, v)
	}
	pos, err = ParsePosition(rest[at+1:])
	if err != nil {
		return "", "", Position{}, err
	}
	return b, rest[:at], pos, nil
}

// HistoryReader is implemented by subscribers whose broker keeps a topic's
// messages readable without consuming them (Kafka, Redis Streams, NATS
// JetStream; PostgreSQL while some group still holds them). relay verify
// is built on it.
type HistoryReader interface {
	// ReadHistory calls fn, in the topic's order (per partition for
	// Kafka), for each message of topic kept by the broker whose Stored
	// time is in [w.Since, w.Until), without consuming it: no group's
	// position, pending list or delivery state changes. It stops at the
	// first error of fn and returns it. Time in ctx bounds it. It returns
	// an error wrapping ErrNotSupported when the backend keeps no history.
	ReadHistory(ctx context.Context, topic string, w Window, fn func(Stored) error) error
}

// Window bounds ReadHistory by the time the broker stored each message.
// A zero Since reads from the oldest message kept, a zero Until to the
// newest at the time of the call.
type Window struct {
	Since, Until time.Time
}

// Contains reports whether t is in [Since, Until).
func (w Window) Contains(t time.Time) bool {
	return (w.Since.IsZero() || !t.Before(w.Since)) && (w.Until.IsZero() || t.Before(w.Until))
}

// Stored is one message as ReadHistory reads it.
type Stored struct {
	// Msg has ID, Key, Metadata and Payload; it is not a delivery (no
	// Ack, no Topic). It is fn's only for the call unless copied.
	Msg *Message
	// Position is where it is kept (see Position).
	Position Position
	// Time is when the broker stored it: the Kafka record timestamp, the
	// time in a Redis entry ID, the NATS stored time, the PostgreSQL
	// created_at.
	Time time.Time
}
