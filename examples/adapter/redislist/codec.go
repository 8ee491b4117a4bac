package redislist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// The element encoding. One list element is one message:
//
//	"RLQ1"                 4 bytes, magic and version
//	attempt                8 lowercase hex digits: the delivery this is (1 = first)
//	len(ID) ID             uvarint length, then the bytes
//	len(Key) Key
//	n                      uvarint: number of metadata pairs, sorted by name
//	n × (len(name) name len(value) value)
//	payload                the rest of the element (0 bytes for a nil payload)
//
// The attempt sits at a fixed offset so that the Lua scripts that hand a
// message back can count the attempt up without decoding the rest.
const (
	magic       = "RLQ1"
	attemptLen  = 8
	headerLen   = len(magic) + attemptLen
	decodeError = "redislist-decode-error"
)

// encode returns the element for m at attempt 1.
func encode(m *relay.Message) []byte {
	names := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		names = append(names, k)
	}
	sort.Strings(names)
	b := make([]byte, 0, headerLen+driver.EncodedSize(m)+binary.MaxVarintLen64*(3+2*len(names)))
	b = append(b, magic...)
	b = fmt.Appendf(b, "%08x", 1)
	b = appendString(b, m.ID)
	b = appendString(b, m.Key)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = appendString(b, k)
		b = appendString(b, m.Metadata[k])
	}
	return append(b, m.Payload...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errShort = errors.New("element ends early")

// decode parses an element. attempt is 0 when the element has no valid
// header.
func decode(raw []byte) (m *relay.Message, attempt int, err error) {
	if len(raw) < headerLen || string(raw[:len(magic)]) != magic {
		return nil, 0, errors.New("not a redislist element (no RLQ1 header)")
	}
	a, err := strconv.ParseUint(string(raw[len(magic):headerLen]), 16, 32)
	if err != nil {
		return nil, 0, fmt.Errorf("bad attempt field: %v", err)
	}
	rest := raw[headerLen:]
	str := func() (string, error) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return "", errShort
		}
		s := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		return s, nil
	}
	m = &relay.Message{}
	if m.ID, err = str(); err != nil {
		return nil, int(a), err
	}
	if m.Key, err = str(); err != nil {
		return nil, int(a), err
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)) {
		return nil, int(a), errShort
	}
	rest = rest[k:]
	if n > 0 {
		m.Metadata = make(relay.Metadata, n)
	}
	for i := uint64(0); i < n; i++ {
		name, err := str()
		if err != nil {
			return nil, int(a), err
		}
		value, err := str()
		if err != nil {
			return nil, int(a), err
		}
		if _, dup := m.Metadata[name]; dup {
			m.Metadata = driver.AddRepeat(m.Metadata, name, value) // the rule for repeated names
			continue
		}
		m.Metadata[name] = value
	}
	m.Payload = append([]byte{}, rest...)
	return m, int(a), nil
}

// poison is what Receive delivers for an element it cannot decode: the
// raw bytes as payload and the problem in metadata, so that a bad element
// never ends a subscription.
func poison(raw []byte, err error) *relay.Message {
	return &relay.Message{
		ID:       relay.NewID(),
		Payload:  append([]byte{}, raw...),
		Metadata: relay.Metadata{decodeError: err.Error()},
	}
}
