package kafka

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/bytesview"
)

// Wire format. A relay message is one Kafka record:
//
//   - Key: the record key (nil when Key is "").
//   - Payload: the record value, always present: a nil or empty Payload is
//     a 0-byte value, never a NULL one.
//   - ID: the header "relay-id".
//   - Metadata: one header per entry, with the same name. Names that begin
//     with the reserved prefix "relay-" are sent as "relay-md-" + name so
//     they never collide with relay's own headers; the receiver strips it.
//   - Tombstones: the metadata entry "kafka.tombstone" = "true" makes the
//     record a tombstone (NULL value, as log compaction expects); the
//     payload must then be empty. The entry is not sent as a header (any
//     other value, such as "false", only removes it). A received NULL value
//     is an empty Payload with "kafka.tombstone" = "true", so re-producing
//     the message (a bridge) writes a tombstone again.
//
// A record from a foreign producer (no relay-id header) gets the ID
// "kafka:TOPIC:PARTITION:OFFSET", the same on every delivery; all its
// headers become metadata. Kafka allows a header name to repeat: the first
// occurrence keeps its name, the 2nd, 3rd, ... become "<name>#2",
// "<name>#3", ... (the next free number if that name is taken by another
// header). Repeats of relay's own headers are handled alike: the first
// relay-id is the ID and later ones are metadata "relay-id#2", ...; a
// foreign header named "kafka.tombstone" is metadata "kafka.tombstone#2",
// since the adapter owns that name.
const (
	reservedPrefix = "relay-"
	headerID       = "relay-id"
	metadataPrefix = "relay-md-"

	// MetadataTombstone is the metadata key that marks a tombstone: "true"
	// on a published message produces a NULL record value; a received NULL
	// value carries it as "true".
	MetadataTombstone = "kafka.tombstone"
)

// isTombstone reports whether m asks for a NULL record value.
func isTombstone(m *relay.Message) bool { return m.Metadata[MetadataTombstone] == "true" }

// validateTombstone refuses a kafka.tombstone entry that is neither "true"
// nor "false", and a tombstone with a payload, which Kafka could not carry.
func validateTombstone(m *relay.Message) error {
	v, ok := m.Metadata[MetadataTombstone]
	switch {
	case !ok || v == "false":
		return nil
	case v != "true":
		return &relay.LimitError{MessageID: m.ID, What: "metadata " + MetadataTombstone, Detail: fmt.Sprintf("value %q; use \"true\" for a tombstone (NULL value) or leave it out", v)}
	case len(m.Payload) > 0:
		return &relay.LimitError{MessageID: m.ID, What: "metadata " + MetadataTombstone, Detail: fmt.Sprintf("a tombstone has no value, but the payload has %d bytes; send an empty payload", len(m.Payload))}
	}
	return nil
}

func encodeRecord(topic string, m *relay.Message) *kgo.Record {
	r := new(kgo.Record)
	encodeInto(r, make([]kgo.RecordHeader, 0, 1+len(m.Metadata)), topic, m)
	return r
}

// encodeInto fills r from m, with headers appended to hdrs (whose capacity
// should be 1+len(m.Metadata)). Key, ID and metadata values are handed to
// the client without copying: the client only reads them, and strings do
// not change.
func encodeInto(r *kgo.Record, hdrs []kgo.RecordHeader, topic string, m *relay.Message) {
	r.Topic, r.Value = topic, m.Payload
	if r.Value == nil {
		r.Value = []byte{} // 0-byte value: nil would be a NULL value (a tombstone)
	}
	if isTombstone(m) {
		r.Value = nil
	}
	if m.Key != "" {
		r.Key = bytesview.Bytes(m.Key)
	}
	hdrs = append(hdrs, kgo.RecordHeader{Key: headerID, Value: bytesview.Bytes(m.ID)})
	for k, v := range m.Metadata {
		if k == MetadataTombstone {
			continue
		}
		hdrs = append(hdrs, kgo.RecordHeader{Key: headerName(k), Value: bytesview.Bytes(v)})
	}
	r.Headers = hdrs
}

// headerName is the header that carries metadata key k: k itself, or
// metadataPrefix + k for a key with the reserved prefix. The prefixed
// names are kept (see reservedHeaders), so that a key that every message
// carries, such as the bridge's relay-hops, does not build its header name
// again for each record.
func headerName(k string) string {
	if !strings.HasPrefix(k, reservedPrefix) {
		return k
	}
	if h, ok := reservedHeaders.names.Load(k); ok {
		return h.(string)
	}
	h := metadataPrefix + k
	if len(k) <= reservedHeaderMaxLen && reservedHeaders.n.Load() < reservedHeadersMax && reservedHeaders.n.Add(1) <= reservedHeadersMax {
		// A clone of k, which may share a decoded message's chunk of
		// memory that the kept name would otherwise hold forever.
		reservedHeaders.names.Store(strings.Clone(k), h)
	}
	return h
}

// headerNameLen is len(headerName(k)), without building the name.
func headerNameLen(k string) int {
	if strings.HasPrefix(k, reservedPrefix) {
		return len(metadataPrefix) + len(k)
	}
	return len(k)
}

// reservedHeaders holds the header names headerName built for metadata
// keys with the reserved prefix: the first reservedHeadersMax keys of up
// to reservedHeaderMaxLen bytes (a producer that makes up such keys per
// message gets no more kept, and long ones are never kept).
var reservedHeaders struct {
	names sync.Map // metadata key -> header name
	n     atomic.Int64
}

const (
	reservedHeadersMax   = 256
	reservedHeaderMaxLen = 64
)

// decodeRecord never fails: whatever a record carries becomes a message.
// The payload is copied so that a redelivery is unaffected by changes the
// application made to an earlier delivery.
func decodeRecord(r *kgo.Record) *relay.Message {
	m := new(relay.Message)
	decodeInto(m, r, new(driver.Arena))
	return m
}

// decodeInto is decodeRecord into m. With an arena, the record's bytes are
// copied into it (one allocation per chunk, not per field; Receive decodes
// a batch through one arena). With a nil arena (share_payloads=true) the
// message shares the record's bytes instead: Payload is a slice of the
// record's value with its capacity cut to its length (an append
// reallocates instead of writing into the next record), and ID, Key and
// metadata values are strings over the record's bytes. Sharing is sound
// because franz-go decodes every fetch into buffers of its own and never
// writes them again; only a kgo.WithPools pool would reuse them, and this
// package configures none.
func decodeInto(m *relay.Message, r *kgo.Record, a *driver.Arena) {
	m.Payload = decodedBytes(a, r.Value)
	if len(r.Key) > 0 {
		m.Key = decodedString(a, r.Key)
	}
	if r.Value == nil {
		m.Metadata = relay.Metadata{MetadataTombstone: "true"}
	}
	// First occurrences keep their names (in a first pass, so that a later
	// repeat never takes the name of a header that comes after it); the
	// repeats are numbered in a second pass.
	var repeats []int
	idSeen := false
	for i, h := range r.Headers {
		if h.Key == headerID {
			if idSeen {
				repeats = append(repeats, i)
			} else {
				m.ID, idSeen = decodedString(a, h.Value), true
			}
			continue
		}
		name := mdName(h.Key)
		if _, taken := m.Metadata[name]; taken || name == MetadataTombstone {
			repeats = append(repeats, i)
			continue
		}
		if m.Metadata == nil {
			m.Metadata = make(relay.Metadata, len(r.Headers))
		}
		m.Metadata[name] = decodedString(a, h.Value)
	}
	for _, i := range repeats {
		h := r.Headers[i]
		m.Metadata = driver.AddRepeat(m.Metadata, mdName(h.Key), string(h.Value))
	}
	if m.ID == "" {
		m.ID = foreignID(r)
	}
}

// decodeArena is the arena a receiver decodes records through: nil with
// share_payloads=true, so that messages share the records' bytes.
func decodeArena(cfg SubscriberConfig) *driver.Arena {
	if cfg.SharePayloads {
		return nil
	}
	return new(driver.Arena)
}

// decodedBytes is p copied into a, or p itself (capacity cut) when a is
// nil; nil when p is empty.
func decodedBytes(a *driver.Arena, p []byte) []byte {
	switch {
	case a != nil:
		return a.Bytes(p)
	case len(p) == 0:
		return nil
	}
	return p[:len(p):len(p)]
}

// decodedString is p as a string, copied into a, or over p's own bytes when
// a is nil.
func decodedString(a *driver.Arena, p []byte) string {
	switch {
	case a != nil:
		return a.String(p)
	case len(p) == 0:
		return ""
	}
	return bytesview.String(p)
}

// mdName is the metadata name of a header (relay-md- stripped).
func mdName(header string) string {
	if strings.HasPrefix(header, metadataPrefix) {
		return header[len(metadataPrefix):]
	}
	return header
}

func foreignID(r *kgo.Record) string {
	return "kafka:" + r.Topic + ":" + strconv.FormatInt(int64(r.Partition), 10) + ":" + strconv.FormatInt(r.Offset, 10)
}

// Upper bounds of Kafka's record encoding (v2 record batches): the batch
// header, and per record its length, attributes, timestamp and offset
// deltas and the varint lengths of key, value, header count and each
// header's name and value.
const (
	batchOverhead     = 61
	recordOverhead    = 5 + 1 + 10 + 5 + 5 + 5 + 5
	headerOverhead    = 5 + 5
	maxTopicNameBytes = 249
)

// recordSize bounds the bytes m takes as a record alone in a batch.
func recordSize(m *relay.Message) int {
	n := batchOverhead + recordOverhead + len(m.Key) + len(m.Payload)
	n += headerOverhead + len(headerID) + len(m.ID)
	for k, v := range m.Metadata {
		if k != MetadataTombstone {
			n += headerOverhead + headerNameLen(k) + len(v)
		}
	}
	return n
}

func validateTopic(topic string) error {
	if topic == "" || topic == "." || topic == ".." {
		return fmt.Errorf("%w: %q", relay.ErrInvalidTopic, topic)
	}
	if len(topic) > maxTopicNameBytes {
		return fmt.Errorf("%w: %d bytes, Kafka allows %d", relay.ErrInvalidTopic, len(topic), maxTopicNameBytes)
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q: Kafka topic names use only ASCII letters, digits, '.', '_' and '-'", relay.ErrInvalidTopic, topic)
		}
	}
	return nil
}
