package gcppubsub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Wire format of a relay message on Pub/Sub.
//
// The data is the payload, Key is the ordering key, and the ID travels in
// the attribute AttrID. Each metadata entry is an attribute of the same
// name, so that other clients read it as one, when Pub/Sub can carry it:
// a name of 1 to 256 bytes and a value of at most 1024, both valid UTF-8,
// the name not starting with "goog" nor being one of relay's two
// attributes, and at most 100 attributes in all. The rest (and an ID
// that cannot be an attribute) is packed, never dropped: it is written
// before the payload in the data, and AttrPacked gives that block's
// length in bytes. The block is the ID (a uvarint length and its bytes;
// length 0 when AttrID carries it) followed by name and value pairs in
// the same form, byte-exact.
const (
	AttrID     = "relay-id"
	AttrPacked = "relay-packed"
	// MetaDecodeError is the metadata entry that says why a delivery
	// could not be decoded; its payload is then the data as it came.
	MetaDecodeError = "relay.decode_error"
)

// attrSafe reports whether metadata name = value can travel as an
// attribute of its own.
func attrSafe(name, value string) bool {
	return name != "" && len(name) <= MaxAttrName && len(value) <= MaxAttrValue &&
		name != AttrID && name != AttrPacked && !hasGoogPrefix(name) &&
		utf8.ValidString(name) && utf8.ValidString(value)
}

func hasGoogPrefix(s string) bool { return len(s) >= 4 && strings.EqualFold(s[:4], "goog") }

func idSafe(id string) bool { return len(id) <= MaxAttrValue && utf8.ValidString(id) }

// encode returns the Pub/Sub message of m. It never fails: what cannot be
// an attribute is packed. The limits are checked by validate.
func encode(m *relay.Message) *pb.PubsubMessage {
	pm := &pb.PubsubMessage{OrderingKey: m.Key, Attributes: make(map[string]string, len(m.Metadata)+1)}
	var packed []string // metadata names that go into the block
	packID := !idSafe(m.ID)
	if !packID {
		pm.Attributes[AttrID] = m.ID
	}
	if len(m.Metadata) > 0 {
		fits := len(m.Metadata) <= MaxAttributes-len(pm.Attributes)
		for k, v := range m.Metadata {
			if !attrSafe(k, v) {
				fits = false
				break
			}
		}
		if fits && !packID {
			for k, v := range m.Metadata {
				pm.Attributes[k] = v
			}
		} else {
			packed = splitMetadata(m.Metadata, pm.Attributes)
		}
	}
	if !packID && len(packed) == 0 {
		pm.Data = m.Payload
		return pm
	}
	var block []byte
	id := ""
	if packID {
		id = m.ID
	}
	block = appendString(block, id)
	for _, k := range packed {
		block = appendString(appendString(block, k), m.Metadata[k])
	}
	pm.Attributes[AttrPacked] = strconv.Itoa(len(block))
	pm.Data = append(block, m.Payload...)
	return pm
}

// splitMetadata writes into attrs the metadata entries that can be
// attributes, in name order, while one attribute is left for AttrPacked,
// and returns the names of the others, in name order.
func splitMetadata(md relay.Metadata, attrs map[string]string) (packed []string) {
	names := make([]string, 0, len(md))
	for k := range md {
		names = append(names, k)
	}
	slices.Sort(names)
	room := MaxAttributes - len(attrs) - 1
	for _, k := range names {
		if v := md[k]; room > 0 && attrSafe(k, v) {
			attrs[k] = v
			room--
		} else {
			packed = append(packed, k)
		}
	}
	return packed
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// wireSize is the size of pm as Pub/Sub counts it against MaxMessageBytes.
func wireSize(pm *pb.PubsubMessage) int {
	n := len(pm.Data) + len(pm.OrderingKey)
	for k, v := range pm.Attributes {
		n += len(k) + len(v)
	}
	return n
}

// validate checks m against the limits of Pub/Sub, after the generic
// size check of the shared layer; caps names the size limit.
func validate(m *relay.Message, caps relay.Capabilities) error {
	if len(m.Key) > MaxOrderingKey {
		return &relay.LimitError{MessageID: m.ID, What: "key", Limit: MaxOrderingKey, Actual: len(m.Key)}
	}
	if !utf8.ValidString(m.Key) {
		return &relay.LimitError{MessageID: m.ID, What: "key", Detail: "not valid UTF-8, which a Pub/Sub ordering key must be"}
	}
	// The common case costs no encoding: everything is an attribute.
	size := len(m.Payload) + len(m.Key) + len(AttrID) + len(m.ID)
	simple := idSafe(m.ID) && len(m.Metadata) < MaxAttributes
	for k, v := range m.Metadata {
		size += len(k) + len(v)
		simple = simple && attrSafe(k, v)
	}
	if !simple {
		size = wireSize(encode(m))
	}
	return driver.SizeError(m, size, caps)
}

// decode returns the relay message of a delivery. It never fails: a
// delivery whose packed block does not read is delivered with its data
// as payload and MetaDecodeError saying why.
func decode(rm *pb.ReceivedMessage) *relay.Message {
	pm := rm.GetMessage()
	m := &relay.Message{ID: pm.GetMessageId(), Key: pm.GetOrderingKey(), Payload: pm.GetData()}
	attrs := pm.GetAttributes()
	n := len(attrs)
	if id, ok := attrs[AttrID]; ok {
		m.ID = id
		n--
	}
	packed, isPacked := attrs[AttrPacked]
	if isPacked {
		n++ // room for MetaDecodeError
	}
	if n > 0 { // no map for a message that carries only its ID
		m.Metadata = make(relay.Metadata, n)
		for k, v := range attrs {
			if k != AttrID && k != AttrPacked {
				m.Metadata[k] = v
			}
		}
	}
	if isPacked {
		if err := unpack(m, packed); err != nil {
			m.Metadata[AttrPacked] = packed
			m.Metadata[MetaDecodeError] = err.Error()
		}
	}
	if len(m.Metadata) == 0 {
		m.Metadata = nil
	}
	return m
}

// unpack reads the packed block whose length the AttrPacked value s gives
// from the start of m.Payload into m, and leaves the payload after it.
// On error m is unchanged.
func unpack(m *relay.Message, s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > len(m.Payload) {
		return fmt.Errorf("%s=%q does not give the length of a packed block within the %d bytes of data", AttrPacked, s, len(m.Payload))
	}
	block := m.Payload[:n]
	id, block, ok := readString(block)
	if !ok {
		return errors.New("packed block: the ID does not read")
	}
	var pairs []string
	for len(block) > 0 {
		var k, v string
		k, block, ok = readString(block)
		if ok {
			v, block, ok = readString(block)
		}
		if !ok {
			return errors.New("packed block: a metadata entry does not read")
		}
		pairs = append(pairs, k, v)
	}
	if id != "" {
		m.ID = id
	}
	for i := 0; i < len(pairs); i += 2 {
		if _, taken := m.Metadata[pairs[i]]; taken {
			m.Metadata = driver.AddRepeat(m.Metadata, pairs[i], pairs[i+1])
		} else {
			m.Metadata[pairs[i]] = pairs[i+1]
		}
	}
	m.Payload = m.Payload[n:]
	return nil
}

func readString(b []byte) (s string, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return "", b, false
	}
	return string(b[w : w+int(n)]), b[w+int(n):], true
}
