package redisstream

import (
	"fmt"
	"slices"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
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
	return appendFields(make([]any, 0, fieldCount(m)), m)
}

// fieldCount is the number of fields and values Encode returns for m.
func fieldCount(m *relay.Message) int {
	n := 4 + 2*len(m.Metadata)
	if m.Key != "" {
		n += 2
	}
	return n
}

// appendFields appends Encode(m) to f.
func appendFields(f []any, m *relay.Message) []any {
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

// Decode turns the fields of stream entry entryID, as a map, into a
// message, as [DecodeFields] does with the fields in name order. A map
// cannot hold a repeated field: use DecodeFields with the entry's ordered
// field list (as XRANGE returns it) to keep every value.
func Decode(entryID string, fields map[string]any) *relay.Message {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	list := make([]string, 0, 2*len(names))
	for _, k := range names {
		list = append(list, k, str(fields[k]))
	}
	return decode(entryID, list, nil)
}

// DecodeFields turns the fields of stream entry entryID, given in entry
// order as name, value, name, value, ... (a trailing name without a value
// is ignored), into a message. It never fails, so an entry written by any
// producer is delivered:
//
//   - "id", "key" and "payload" become ID, Key and Payload; "md:<name>"
//     becomes metadata <name>.
//   - Any other field becomes metadata under its own name.
//   - Without an "id" field the ID is the stream entry ID (such as
//     "1700000000000-0"), which is unique within the stream.
//   - Without a "payload" field the payload is taken from the first of
//     ForeignPayloadFields present (which is then not in the metadata);
//     if there is none, the payload is empty and every field is metadata.
//   - An empty payload is a non-nil empty slice, however it was written
//     (Encode writes a present, empty "payload" field for a nil or empty
//     Payload).
//   - A repeated name (which relay never writes, but XADD allows) loses
//     nothing: the first occurrence is used as above, and each later one
//     becomes metadata "<name>#2", "<name>#3", ... in entry order, where
//     <name> is the metadata name (without "md:") or, for a repeated "id",
//     "key" or payload field, the field name itself. A number whose name
//     is already taken in the entry is skipped. Two fields that give the
//     same metadata name (such as "md:x" and "x") count as a repetition.
func DecodeFields(entryID string, fields []string) *relay.Message {
	return decode(entryID, fields, nil)
}

// text is what a field name or value can be: strings from callers, or
// slices of a raw reply buffer from the receiver (copied before they are
// kept).
type text interface{ ~string | ~[]byte }

// decode returns the message of a stream entry (see DecodeFields).
func decode[S text](entryID string, f []S, a *driver.Arena) *relay.Message {
	m := new(relay.Message)
	decodeInto(m, entryID, f, a)
	return m
}

// decodeInto decodes a stream entry into m (see DecodeFields). What it
// keeps of f is copied: into a, when a is not nil and f holds slices of a
// reply, so that one read step costs one allocation per arena chunk
// instead of one per ID, payload and value; onto the heap otherwise.
func decodeInto[S text](m *relay.Message, entryID string, f []S, a *driver.Arena) {
	m.ID = entryID
	n := len(f) &^ 1
	payloadName := FieldPayload
	if !hasField(f[:n], FieldPayload) {
		payloadName = ""
		for _, name := range ForeignPayloadFields {
			if hasField(f[:n], name) {
				payloadName = name
				break
			}
		}
	}
	var seenPayload, seenID, seenKey bool
	var later []int // indexes of repeated fields, named after the first pass
	for i := 0; i < n; i += 2 {
		k, v := f[i], f[i+1]
		switch {
		case payloadName != "" && string(k) == payloadName:
			if seenPayload {
				later = append(later, i)
				continue
			}
			seenPayload = true
			if len(v) > 0 {
				// A copy whatever S is: converting a []byte to []byte
				// would keep the slice of the raw reply, and so the whole
				// reply (every entry of one read) in memory for as long
				// as this message is.
				m.Payload = keepBytes(a, v)
			}
		case string(k) == FieldID:
			if seenID {
				later = append(later, i)
				continue
			}
			seenID = true
			m.ID = keepString(a, v)
		case string(k) == FieldKey:
			if seenKey {
				later = append(later, i)
				continue
			}
			seenKey = true
			m.Key = keepString(a, v)
		default:
			if m.Metadata == nil {
				m.Metadata = make(relay.Metadata, (n-i)/2)
			}
			name := mdName(k, a)
			if _, taken := m.Metadata[name]; taken {
				later = append(later, i)
				continue
			}
			m.Metadata[name] = keepString(a, v)
		}
	}
	if m.Payload == nil {
		m.Payload = []byte{} // an empty or absent payload reads as a non-nil empty slice
	}
	for _, i := range later {
		k := string(f[i])
		if k != payloadName && k != FieldID && k != FieldKey {
			k = mdName(f[i], a)
		}
		m.Metadata = driver.AddRepeat(m.Metadata, k, keepString(a, f[i+1]))
	}
}

// keepString returns a copy of v as a string: in a when v is a slice of
// a reply and a is not nil, on the heap otherwise.
func keepString[S text](a *driver.Arena, v S) string {
	if b, ok := any(v).([]byte); ok && a != nil {
		return a.String(b)
	}
	return string(v)
}

// keepBytes returns a copy of v, as keepString does; never nil.
func keepBytes[S text](a *driver.Arena, v S) []byte {
	if b, ok := any(v).([]byte); ok && a != nil && len(b) > 0 {
		return a.Bytes(b)
	}
	return append([]byte{}, v...)
}

// mdName is the metadata name of field k: k without MetadataPrefix.
func mdName[S text](k S, a *driver.Arena) string {
	if len(k) >= len(MetadataPrefix) && string(k[:len(MetadataPrefix)]) == MetadataPrefix {
		return keepString(a, k[len(MetadataPrefix):])
	}
	return keepString(a, k)
}

func hasField[S text](f []S, name string) bool {
	for i := 0; i < len(f); i += 2 {
		if string(f[i]) == name {
			return true
		}
	}
	return false
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
