package mqtt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/uuid"
)

// The envelope: a PUBLISH payload that begins with Magic is
//
//	Magic ("\x00RLY", 4 bytes), version (1 byte, 1),
//	ID, Key, metadata count, each (name, value) sorted by name,
//	then the payload: everything that is left.
//
// Strings are a uvarint length and the bytes; the count is a uvarint.
// Anything else is a plain payload (see decode).
const (
	Magic           = "\x00RLY"
	envelopeVersion = 1
	// MetaDecodeError is the metadata name that carries why a payload that
	// began with Magic could not be read; the message is then delivered
	// with the whole payload as it came.
	MetaDecodeError = "relay.decode_error"
)

// plain reports whether m goes without envelope under mode.
func plain(m *relay.Message, mode Envelope) bool {
	if mode == EnvelopeNever {
		return true
	}
	return m.Key == "" && len(m.Metadata) == 0 && !bytes.HasPrefix(m.Payload, []byte(Magic)) &&
		isDerivedForm(m.ID) && m.ID == DerivedID(m.Payload)
}

// encode returns m's PUBLISH payload.
func encode(m *relay.Message, mode Envelope) []byte {
	if plain(m, mode) {
		return m.Payload
	}
	b := make([]byte, 0, envelopeSize(m))
	b = append(b, Magic...)
	b = append(b, envelopeVersion)
	b = appendString(b, m.ID)
	b = appendString(b, m.Key)
	b = binary.AppendUvarint(b, uint64(len(m.Metadata)))
	names := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = appendString(b, k)
		b = appendString(b, m.Metadata[k])
	}
	return append(b, m.Payload...)
}

// encodedSize is len(encode(m, mode)), without encoding.
func encodedSize(m *relay.Message, mode Envelope) int {
	if plain(m, mode) {
		return len(m.Payload)
	}
	return envelopeSize(m)
}

func envelopeSize(m *relay.Message) int {
	n := len(Magic) + 1 + stringSize(m.ID) + stringSize(m.Key) + uvarintSize(uint64(len(m.Metadata)))
	for k, v := range m.Metadata {
		n += stringSize(k) + stringSize(v)
	}
	return n + len(m.Payload)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func stringSize(s string) int { return uvarintSize(uint64(len(s))) + len(s) }

func uvarintSize(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// decode reads a PUBLISH payload into a new message whose payload is a
// copy in a (p stays the receiver's, for redeliveries). A payload with
// the envelope gives the message it carries; a plain one gives the
// payload as it is, no Key, no Metadata and the ID DerivedID(payload); an
// envelope that does not read gives the whole payload with the problem in
// MetaDecodeError and the derived ID, so that poison input is delivered,
// never an error.
func decode(p []byte, a *driver.Arena) *relay.Message {
	if !bytes.HasPrefix(p, []byte(Magic)) {
		return &relay.Message{ID: DerivedID(p), Payload: a.Bytes(p)}
	}
	m, err := readEnvelope(p[len(Magic):])
	if err != nil {
		return &relay.Message{ID: DerivedID(p), Payload: a.Bytes(p),
			Metadata: relay.Metadata{MetaDecodeError: fmt.Sprintf("relay/mqtt: payload starts with the relay envelope prefix but %v", err)}}
	}
	m.Payload = a.Bytes(m.Payload)
	return m
}

var errShort = errors.New("the envelope ends early")

func readEnvelope(b []byte) (*relay.Message, error) {
	if len(b) == 0 || b[0] != envelopeVersion {
		return nil, errors.New("its version is unknown")
	}
	b = b[1:]
	str := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	m := &relay.Message{}
	var ok1, ok2 bool
	if m.ID, ok1 = str(); !ok1 {
		return nil, errShort
	}
	if m.Key, ok2 = str(); !ok2 {
		return nil, errShort
	}
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)) {
		return nil, errShort
	}
	b = b[k:]
	if count > 0 {
		m.Metadata = make(relay.Metadata, count)
	}
	for range count {
		name, ok := str()
		value, ok2 := str()
		if !ok || !ok2 {
			return nil, errShort
		}
		m.Metadata[name] = value
	}
	if m.ID == "" {
		return nil, errors.New("it carries no ID")
	}
	m.Payload = b
	return m, nil
}

// DerivedID is the ID of a plain payload: a UUID (version 8) from the
// SHA-256 of the payload, so that every redelivery of a message from a
// publisher that is not relay gets the same ID, and a relay publisher
// sends a message with that ID (and nothing else to carry) without
// envelope. Identical payloads share an ID, on every topic.
func DerivedID(payload []byte) string {
	sum := sha256.Sum256(payload)
	var u [16]byte
	copy(u[:], sum[:])
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return uuid.String(u)
}

// isDerivedForm reports whether id looks like a DerivedID (a canonical
// version 8 UUID), so that other IDs skip the hash.
func isDerivedForm(id string) bool {
	return len(id) == 36 && id[14] == '8' && strings.IndexByte("89ab", id[19]) >= 0
}

// validateTopic refuses what is not an MQTT topic name a client may
// publish to: empty, wildcards ('+', '#'), NUL, invalid UTF-8, a leading
// '$' (reserved for the broker: $SYS, $share), over 65535 bytes.
func validateTopic(topic string) error {
	why := ""
	switch {
	case topic == "":
		why = "empty"
	case len(topic) > 65535:
		why = "longer than 65535 bytes"
	case strings.ContainsAny(topic, "+#"):
		why = "holds a wildcard ('+' or '#'), which only subscriptions may"
	case strings.ContainsRune(topic, 0):
		why = "holds NUL"
	case !utf8.ValidString(topic):
		why = "is not valid UTF-8"
	case topic[0] == '$':
		why = "begins with '$', which MQTT reserves for the broker"
	default:
		return nil
	}
	return fmt.Errorf("%w: MQTT topic %q %s", relay.ErrInvalidTopic, topic, why)
}
