package sqs

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-relay/relay"
)

// Wire format of a relay message on SQS and SNS.
//
// The body is the payload when the payload is non-empty text that SQS
// accepts (XML 1.0 characters in valid UTF-8); otherwise the body is the
// payload in standard base64 and the attribute AttrEncoding says so.
//
// ID, Key and Metadata travel as String message attributes, at most
// MaxAttributes of them per message. Relay's own attributes start with
// "_relay."; a metadata key becomes an attribute whose name is the key
// with every byte outside [A-Za-z0-9-] (and a '.' where SQS forbids one)
// written as '_' and two upper-case hex digits, so the name is reversible
// and never collides with relay's own. Metadata that does not fit (the
// 11th key and later, empty values, names over 256 bytes, values SQS
// cannot carry) is packed into the one attribute AttrPacked as JSON; it is
// never dropped and never an error.
const (
	AttrID       = "_relay.id"  // message ID
	AttrKey      = "_relay.key" // message Key, when not empty
	AttrEncoding = "_relay.enc" // EncBase64 or EncEmpty when the body is not the payload
	AttrPacked   = "_relay.md"  // JSON of what did not fit in attributes of its own

	EncBase64 = "base64"
	EncEmpty  = "empty"

	// emptyBody stands for an empty payload: SQS and SNS refuse empty bodies.
	emptyBody = "-"
	// MetaDecodeError is the metadata key that carries why a delivery could
	// not be decoded; such a message's payload is the raw body.
	MetaDecodeError = "relay.decode_error"

	maxAttrName  = 256
	attrTypeText = "String"
)

// encoded is a message ready for SendMessage or Publish.
type encoded struct {
	body  string
	attrs map[string]string // every value is of type String
	size  int               // SQS's size accounting: body + names + types + values
}

// packed is the JSON of AttrPacked. Strings that are not valid UTF-8 go
// into the *Raw fields (base64 in JSON).
type packed struct {
	ID     string            `json:"id,omitempty"`
	IDRaw  []byte            `json:"id_raw,omitempty"`
	Key    string            `json:"key,omitempty"`
	KeyRaw []byte            `json:"key_raw,omitempty"`
	MD     map[string]string `json:"md,omitempty"`
	MDRaw  [][2][]byte       `json:"md_raw,omitempty"`
}

func (p *packed) empty() bool {
	return p.ID == "" && p.IDRaw == nil && p.Key == "" && p.KeyRaw == nil && len(p.MD) == 0 && len(p.MDRaw) == 0
}

// encode returns the wire form of m. It never fails: whatever SQS cannot
// carry natively is encoded. The size is checked by the caller. With
// sizeOnly the body is left empty and only the size is computed.
func encode(m *relay.Message, sizeOnly bool) encoded {
	e := encoded{attrs: make(map[string]string, 4)}
	var pk packed

	bodyLen := 0
	switch {
	case len(m.Payload) == 0:
		e.body, bodyLen = emptyBody, len(emptyBody)
		e.attrs[AttrEncoding] = EncEmpty
	case validText(string(m.Payload)):
		bodyLen = len(m.Payload)
		if !sizeOnly {
			e.body = string(m.Payload)
		}
	default:
		bodyLen = base64.StdEncoding.EncodedLen(len(m.Payload))
		if !sizeOnly {
			e.body = base64.StdEncoding.EncodeToString(m.Payload)
		}
		e.attrs[AttrEncoding] = EncBase64
	}

	if validText(m.ID) {
		e.attrs[AttrID] = m.ID
	} else if utf8.ValidString(m.ID) {
		pk.ID = m.ID
	} else {
		pk.IDRaw = []byte(m.ID)
	}
	if m.Key != "" {
		if validText(m.Key) {
			e.attrs[AttrKey] = m.Key
		} else if utf8.ValidString(m.Key) {
			pk.Key = m.Key
		} else {
			pk.KeyRaw = []byte(m.Key)
		}
	}

	if len(m.Metadata) > 0 {
		keys := make([]string, 0, len(m.Metadata))
		for k := range m.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		type native struct{ key, name, value string }
		natives := make([]native, 0, len(keys))
		var rest []string
		for _, k := range keys {
			v := m.Metadata[k]
			name := attrName(k)
			if len(name) <= maxAttrName && validText(v) {
				natives = append(natives, native{k, name, v})
			} else {
				rest = append(rest, k)
			}
		}
		budget := MaxAttributes - len(e.attrs)
		if len(rest) > 0 || !pk.empty() || len(natives) > budget {
			budget-- // room for AttrPacked
		}
		if len(natives) > budget {
			for _, n := range natives[budget:] {
				rest = append(rest, n.key)
			}
			natives = natives[:budget]
		}
		for _, n := range natives {
			e.attrs[n.name] = n.value
		}
		for _, k := range rest {
			v := m.Metadata[k]
			if utf8.ValidString(k) && utf8.ValidString(v) {
				if pk.MD == nil {
					pk.MD = make(map[string]string, len(rest))
				}
				pk.MD[k] = v
			} else {
				pk.MDRaw = append(pk.MDRaw, [2][]byte{[]byte(k), []byte(v)})
			}
		}
	}
	if !pk.empty() {
		e.attrs[AttrPacked] = asciiJSON(&pk)
	}

	e.size = bodyLen
	for k, v := range e.attrs {
		e.size += len(k) + len(attrTypeText) + len(v)
	}
	return e
}

// encodedSize is the size SQS and SNS count for m: body plus attribute
// names, types and values.
func encodedSize(m *relay.Message) int { return encode(m, true).size }

// attrName returns the reversible attribute name of metadata key k.
func attrName(k string) string {
	var b strings.Builder
	b.Grow(len(k) + 8)
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		case c == '.' && i > 0 && i < len(k)-1 && k[i-1] != '.':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "_%02X", c)
		}
	}
	s := b.String()
	if s == "" {
		return "_" // the empty key; '_' alone is never produced otherwise
	}
	// Names starting with AWS. or Amazon. (any case) are reserved.
	if l := strings.ToLower(s); strings.HasPrefix(l, "aws.") || strings.HasPrefix(l, "amazon.") {
		s = fmt.Sprintf("_%02X", s[0]) + s[1:]
	}
	return s
}

// attrNameDecode reverses attrName.
func attrNameDecode(name string) string {
	if name == "_" {
		return ""
	}
	if !strings.Contains(name, "_") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		if name[i] == '_' && i+2 < len(name) && isUpperHex(name[i+1]) && isUpperHex(name[i+2]) {
			b.WriteByte(unhex(name[i+1])<<4 | unhex(name[i+2]))
			i += 2
			continue
		}
		b.WriteByte(name[i])
	}
	return b.String()
}

func isUpperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// validText reports whether s is non-empty, valid UTF-8 and made only of
// the characters SQS accepts in bodies and attribute values: #x9 #xA #xD
// #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF.
func validText(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf { // ASCII fast path
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return false
		}
		if r >= 0xD800 && r <= 0xDFFF || r == 0xFFFE || r == 0xFFFF {
			return false
		}
		i += n
	}
	return true
}

// asciiJSON marshals v as JSON made only of printable ASCII: every
// non-ASCII character is written as a \u escape, so the result is always
// a valid attribute value whatever the strings hold.
func asciiJSON(v any) string {
	raw, err := json.Marshal(v)
	if err != nil { // cannot happen for packed
		panic(err)
	}
	ascii := true
	for _, c := range raw {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return string(raw)
	}
	var b strings.Builder
	b.Grow(len(raw) + 32)
	for _, r := range string(raw) {
		switch {
		case r < utf8.RuneSelf:
			b.WriteByte(byte(r))
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// received is what decode needs of one delivery, from SQS directly or
// from an unwrapped SNS envelope.
type received struct {
	body    string
	attrs   map[string]string // message attributes (Binary ones as raw bytes)
	msgID   string            // the broker's message ID
	groupID string            // FIFO MessageGroupId, if any
}

// decode turns a delivery into a message. It never fails: a delivery from
// another producer is taken as it is (body as payload, attributes as
// metadata, the broker's message ID as ID, the FIFO group as Key), and a
// relay delivery whose encoding is damaged is delivered with its raw body
// as payload and the problem in metadata MetaDecodeError.
func decode(r received) *relay.Message {
	m := decodeMsg(r)
	if m.Payload == nil {
		m.Payload = []byte{} // rule 2: an empty payload reads as a non-nil empty slice
	}
	return m
}

func decodeMsg(r received) *relay.Message {
	_, hasID := r.attrs[AttrID]
	_, hasPacked := r.attrs[AttrPacked]
	if !hasID && !hasPacked {
		m := &relay.Message{ID: r.msgID, Key: r.groupID}
		if r.body != "" {
			m.Payload = []byte(r.body)
		}
		for k, v := range r.attrs {
			setMD(m, k, v)
		}
		return m
	}

	m := &relay.Message{ID: r.attrs[AttrID], Key: r.attrs[AttrKey]}
	var problems []string
	switch enc := r.attrs[AttrEncoding]; enc {
	case "":
		if r.body != "" {
			m.Payload = []byte(r.body)
		}
	case EncEmpty:
	case EncBase64:
		p, err := base64.StdEncoding.DecodeString(r.body)
		if err != nil {
			problems = append(problems, "body is not the base64 its "+AttrEncoding+" attribute says: "+err.Error())
			p = []byte(r.body)
		}
		if len(p) > 0 {
			m.Payload = p
		}
	default:
		problems = append(problems, fmt.Sprintf("unknown body encoding %q", enc))
		m.Payload = []byte(r.body)
	}
	for name, v := range r.attrs {
		if strings.HasPrefix(name, "_relay.") {
			continue
		}
		setMD(m, attrNameDecode(name), v)
	}
	if raw, ok := r.attrs[AttrPacked]; ok {
		var pk packed
		if err := json.Unmarshal([]byte(raw), &pk); err != nil {
			problems = append(problems, "packed metadata is not valid JSON: "+err.Error())
		} else {
			if pk.ID != "" {
				m.ID = pk.ID
			} else if pk.IDRaw != nil {
				m.ID = string(pk.IDRaw)
			}
			if pk.Key != "" {
				m.Key = pk.Key
			} else if pk.KeyRaw != nil {
				m.Key = string(pk.KeyRaw)
			}
			for k, v := range pk.MD {
				setMD(m, k, v)
			}
			for _, kv := range pk.MDRaw {
				setMD(m, string(kv[0]), string(kv[1]))
			}
		}
	}
	if m.ID == "" {
		m.ID = r.msgID
	}
	if len(problems) > 0 {
		setMD(m, MetaDecodeError, strings.Join(problems, "; "))
	}
	return m
}

func setMD(m *relay.Message, k, v string) {
	if m.Metadata == nil {
		m.Metadata = make(relay.Metadata)
	}
	m.Metadata[k] = v
}
