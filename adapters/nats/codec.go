package nats

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
)

// Header names written by this adapter. The metadata prefixes keep user
// metadata from clashing with the adapter's own headers and NATS's.
const (
	// HeaderMsgID carries the relay message ID; JetStream deduplicates on it.
	HeaderMsgID = jetstream.MsgIDHeader // "Nats-Msg-Id"
	// HeaderIDB64 carries an ID that is not header-safe, base64 (std).
	HeaderIDB64 = "Relay-Id-B64"
	// HeaderKey carries a header-safe Key.
	HeaderKey = "Relay-Key"
	// HeaderKeyB64 carries a Key that is not header-safe, base64 (std).
	HeaderKeyB64 = "Relay-Key-B64"
	// MetaPrefix precedes a header-safe metadata name; the value is as is.
	MetaPrefix = "Relay-M-"
	// MetaB64Prefix precedes the base64url (unpadded) form of a metadata
	// name when the name or the value is not header-safe; the value is
	// base64 (std).
	MetaB64Prefix = "Relay-Mx-"
)

var b64 = base64.StdEncoding

// The headers of the CloudEvents NATS protocol binding: the attributes
// ("ce-id", "ce-source", ...) and the Content-Type that marks structured
// mode. Metadata whose name starts with CloudEventsPrefix or is exactly
// HeaderContentType is written as the header of the same name, not under
// MetaPrefix, when name and value are header-safe, so that any CloudEvents
// consumer reads what relay's cloudevents package writes. Such a header
// comes back as the same metadata, as every header from another publisher
// does.
const (
	CloudEventsPrefix = "ce-"
	HeaderContentType = "Content-Type"
)

// plainHeader reports whether metadata k = v is written as the header k.
func plainHeader(k, v string) bool {
	return (strings.HasPrefix(k, CloudEventsPrefix) || k == HeaderContentType) && headerSafeName(k) && headerSafeValue(v)
}

// headerSafeName reports whether s can be a header name as is: the
// printable ASCII that nats.go accepts in a header name (no space and
// none of "()/,:;<=>?@[\]{}), non-empty.
func headerSafeName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(forbiddenNameChars, c) >= 0 {
			return false
		}
	}
	return true
}

const forbiddenNameChars = "\"()/,:;<=>?@[\\]{}"

// headerSafeValue reports whether s survives a NATS header as is:
// printable ASCII and spaces, not starting or ending with a space
// (nats.go trims both ends of a value and turns CR and LF into spaces).
func headerSafeValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= 0x7f {
			return false
		}
	}
	return !strings.HasPrefix(s, " ") && !strings.HasSuffix(s, " ")
}

// encode builds the NATS message for m on subject. The ID always goes in
// Nats-Msg-Id (JetStream's duplicate detection); one that is not
// header-safe is written base64 there and in Relay-Id-B64.
func encode(subject string, m *relay.Message) *natsgo.Msg {
	h := make(natsgo.Header, len(m.Metadata)+2)
	if headerSafeValue(m.ID) {
		h[HeaderMsgID] = []string{m.ID}
	} else {
		e := b64.EncodeToString([]byte(m.ID))
		h[HeaderMsgID] = []string{e}
		h[HeaderIDB64] = []string{e}
	}
	if m.Key != "" {
		if headerSafeValue(m.Key) {
			h[HeaderKey] = []string{m.Key}
		} else {
			h[HeaderKeyB64] = []string{b64.EncodeToString([]byte(m.Key))}
		}
	}
	for k, v := range m.Metadata {
		if plainHeader(k, v) {
			h[k] = []string{v}
		} else if headerSafeName(k) && headerSafeValue(v) {
			h[MetaPrefix+k] = []string{v}
		} else {
			h[MetaB64Prefix+base64.RawURLEncoding.EncodeToString([]byte(k))] = []string{b64.EncodeToString([]byte(v))}
		}
	}
	data := m.Payload
	if data == nil {
		data = []byte{} // rule 2: a present, 0-byte payload
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: data}
}

// encodedSize is the size of m's NATS message as the server counts it
// against max_payload: the header block ("NATS/1.0\r\n", one
// "name: value\r\n" per header, "\r\n") plus the payload.
func encodedSize(m *relay.Message) int {
	line := func(name, value string) int { return len(name) + 2 + len(value) + 2 }
	n := len("NATS/1.0\r\n") + 2 + len(m.Payload)
	if headerSafeValue(m.ID) {
		n += line(HeaderMsgID, m.ID)
	} else {
		e := b64.EncodedLen(len(m.ID))
		n += len(HeaderMsgID) + len(HeaderIDB64) + 2*(4+e)
	}
	if m.Key != "" {
		if headerSafeValue(m.Key) {
			n += line(HeaderKey, m.Key)
		} else {
			n += len(HeaderKeyB64) + 4 + b64.EncodedLen(len(m.Key))
		}
	}
	for k, v := range m.Metadata {
		if plainHeader(k, v) {
			n += line(k, v)
		} else if headerSafeName(k) && headerSafeValue(v) {
			n += line(MetaPrefix+k, v)
		} else {
			n += len(MetaB64Prefix) + base64.RawURLEncoding.EncodedLen(len(k)) + 4 + b64.EncodedLen(len(v))
		}
	}
	return n
}

// decode turns a delivered JetStream message into a relay message.
//
// The adapter's own headers give ID, Key and metadata back byte-exact.
// Every other header, from a foreign publisher, becomes metadata under
// its own name, with every value: a repeated header's first value keeps
// the name and the 2nd, 3rd, ... are kept as "<name>#2", "<name>#3", ...
// (the next free number when that name is taken). Two headers that decode
// to one metadata name (only a foreign publisher writes such a message)
// are both kept the same way, in header-name order. A message without an
// ID header gets "nats:<stream>:<stream sequence>". A relay header whose
// base64 does not decode is kept as metadata under its raw header name.
func decode(h natsgo.Header, data []byte, stream string, seq uint64) *relay.Message {
	m := &relay.Message{Payload: data}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	// names are the headers that may give metadata: all but the adapter's
	// own ID and Key headers with their one value.
	var names []string
	for name := range h {
		if !isOwnHeader(name) || len(h[name]) > 1 {
			names = append(names, name)
		}
	}
	var md relay.Metadata
	if len(names) > 0 {
		md = relay.Metadata{}
	}
	var foreign []string
	slices.Sort(names) // a stable result when two headers claim one name
	for _, name := range names {
		vs := h[name]
		if len(vs) == 0 {
			continue
		}
		switch {
		case name == HeaderMsgID || name == HeaderIDB64 || name == HeaderKey || name == HeaderKeyB64:
			if len(vs) > 1 {
				foreign = append(foreign, name)
			}
			continue
		case strings.HasPrefix(name, MetaPrefix) && len(vs) == 1:
			putFree(md, name[len(MetaPrefix):], vs[0], 1)
			continue
		case strings.HasPrefix(name, MetaB64Prefix) && len(vs) == 1:
			k, err1 := base64.RawURLEncoding.DecodeString(name[len(MetaB64Prefix):])
			v, err2 := b64.DecodeString(vs[0])
			if err1 == nil && err2 == nil {
				putFree(md, string(k), string(v), 1)
				continue
			}
		}
		foreign = append(foreign, name)
	}
	m.ID = h.Get(HeaderMsgID)
	if e := h.Get(HeaderIDB64); e != "" {
		if id, err := b64.DecodeString(e); err == nil {
			m.ID = string(id)
		}
	}
	if m.ID == "" {
		m.ID = "nats:" + stream + ":" + strconv.FormatUint(seq, 10)
	}
	m.Key = h.Get(HeaderKey)
	if e := h.Get(HeaderKeyB64); e != "" {
		if k, err := b64.DecodeString(e); err == nil {
			m.Key = string(k)
		}
	}
	// Foreign headers (and repeats of the adapter's own) are added after
	// the adapter's metadata, in sorted order so the numbering is stable:
	// first every header's first value under its own name, then the
	// repeats, so that a foreign header named "x#2" keeps its name.
	slices.Sort(foreign)
	for _, name := range foreign {
		if !isOwnHeader(name) {
			putFree(md, name, h[name][0], 1)
		}
	}
	for _, name := range foreign {
		for _, v := range h[name][1:] {
			putFree(md, name, v, 2)
		}
	}
	if len(md) > 0 {
		m.Metadata = md
	}
	return m
}

func isOwnHeader(name string) bool {
	return name == HeaderMsgID || name == HeaderIDB64 || name == HeaderKey || name == HeaderKeyB64
}

// putFree stores v under name when n is 1 and name is free, otherwise
// under "<name>#<k>" for the first free k >= max(n, 2).
func putFree(md relay.Metadata, name, v string, n int) {
	if n == 1 {
		if _, taken := md[name]; !taken {
			md[name] = v
			return
		}
		n = 2
	}
	for k := n; ; k++ {
		key := name + "#" + strconv.Itoa(k)
		if _, taken := md[key]; !taken {
			md[key] = v
			return
		}
	}
}
