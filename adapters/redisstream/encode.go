package redisstream

import (
	"fmt"
	"slices"
	"strings"

	"github.com/go-relay/relay"
)

// Field names of a stream entry written by relay.
const (
	FieldID      = "id"
	FieldKey     = "key"
	FieldPayload = "payload"
	// MetadataPrefix precedes each metadata name: metadata "trace" is the
	// field "md:trace".
	MetadataPrefix = "md:"
)

// ForeignPayloadFields are the fields, in order of preference, whose value
// becomes the payload of an entry that has no "payload" field.
var ForeignPayloadFields = []string{"data", "body", "message", "value"}

// Encode returns the field/value pairs of the stream entry for m, in the
// order XADD writes them: id, key (omitted when empty), payload, then one
// md:<name> field per metadata entry in name order. It is safe for
// concurrent use and does not retain m.
func Encode(m *relay.Message) []any {
	n := 4 + 2*len(m.Metadata)
	if m.Key != "" {
		n += 2
	}
	f := make([]any, 0, n)
	f = append(f, FieldID, m.ID)
	if m.Key != "" {
		f = append(f, FieldKey, m.Key)
	}
	f = append(f, FieldPayload, m.Payload)
	switch len(m.Metadata) {
	case 0:
	case 1:
		for k, v := range m.Metadata {
			f = append(f, MetadataPrefix+k, v)
		}
	default:
		keys := make([]string, 0, len(m.Metadata))
		for k := range m.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			f = append(f, MetadataPrefix+k, m.Metadata[k])
		}
	}
	return f
}

// encodedSize is the number of bytes Encode puts on the wire for m,
// field names included.
func encodedSize(m *relay.Message) int {
	n := len(FieldID) + len(m.ID) + len(FieldPayload) + len(m.Payload)
	if m.Key != "" {
		n += len(FieldKey) + len(m.Key)
	}
	for k, v := range m.Metadata {
		n += len(MetadataPrefix) + len(k) + len(v)
	}
	return n
}

// Decode turns the fields of stream entry entryID into a message. It never
// fails, so an entry written by any producer is delivered:
//
//   - "id", "key" and "payload" become ID, Key and Payload; "md:<name>"
//     becomes metadata <name>.
//   - Any other field becomes metadata under its own name.
//   - Without an "id" field the ID is the stream entry ID (such as
//     "1700000000000-0"), which is unique within the stream.
//   - Without a "payload" field the payload is taken from the first of
//     ForeignPayloadFields present (which is then not in the metadata);
//     if there is none, the payload is empty and every field is metadata.
func Decode(entryID string, fields map[string]any) *relay.Message {
	m := &relay.Message{ID: entryID}
	// Fast path: an entry written by relay without metadata.
	if raw, ok := fields[FieldPayload]; ok {
		n := 1
		if id, ok := fields[FieldID]; ok {
			m.ID = str(id)
			n++
		}
		if k, ok := fields[FieldKey]; ok {
			m.Key = str(k)
			n++
		}
		if v := str(raw); v != "" {
			m.Payload = []byte(v)
		}
		if n == len(fields) {
			return m
		}
		for k, raw := range fields {
			switch {
			case k == FieldPayload || k == FieldID || k == FieldKey:
			case strings.HasPrefix(k, MetadataPrefix):
				setMD(m, k[len(MetadataPrefix):], str(raw))
			default:
				setMD(m, k, str(raw))
			}
		}
		return m
	}
	payloadField := ""
	for _, name := range ForeignPayloadFields {
		if _, ok := fields[name]; ok {
			payloadField = name
			break
		}
	}
	for k, raw := range fields {
		v := str(raw)
		switch {
		case k == payloadField:
			if v != "" {
				m.Payload = []byte(v)
			}
		case k == FieldID:
			m.ID = v
		case k == FieldKey:
			m.Key = v
		case strings.HasPrefix(k, MetadataPrefix):
			setMD(m, k[len(MetadataPrefix):], v)
		default:
			setMD(m, k, v)
		}
	}
	return m
}

func setMD(m *relay.Message, k, v string) {
	if m.Metadata == nil {
		m.Metadata = make(relay.Metadata)
	}
	m.Metadata[k] = v
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}
