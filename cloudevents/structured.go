package cloudevents

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-relay/relay"
)

// DecodeJSON decodes one event in the JSON event format (the structured
// content mode's payload):
//
//   - data_base64 is decoded to Data;
//   - data holding a JSON string is that string's text when
//     datacontenttype is not JSON (absent, application/json or a +json
//     type); otherwise Data is the data member's JSON text as it appears
//     in doc;
//   - extension values that are JSON strings, numbers or booleans become
//     their canonical string (a number as written, true/false); null
//     means absent; an object or array is an error.
//
// Errors match ErrInvalidEvent. DecodeJSON does not retain doc.
func DecodeJSON(doc []byte) (*Event, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, invalid("structured event is not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, invalid("structured event has data after the JSON object")
	}
	e := &Event{}
	str := func(name string) (string, bool, error) {
		r, ok := raw[name]
		if !ok || string(r) == "null" {
			return "", false, nil
		}
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return "", false, invalid("attribute %s is not a JSON string", name)
		}
		return s, true, nil
	}
	for _, a := range [...]struct {
		name string
		dst  *string
	}{
		{"specversion", &e.SpecVersion}, {"id", &e.ID}, {"source", &e.Source}, {"type", &e.Type},
		{"subject", &e.Subject}, {"datacontenttype", &e.DataContentType}, {"dataschema", &e.DataSchema},
	} {
		s, _, err := str(a.name)
		if err != nil {
			return nil, err
		}
		*a.dst = s
	}
	if s, ok, err := str("time"); err != nil {
		return nil, err
	} else if ok {
		t, err := parseTime(s)
		if err != nil {
			return nil, err
		}
		e.Time = t
	}
	data, hasData := raw["data"]
	if hasData && string(data) == "null" {
		hasData = false
	}
	b64, hasB64, err := str("data_base64")
	if err != nil {
		return nil, err
	}
	switch {
	case hasData && hasB64:
		return nil, invalid("structured event has both data and data_base64")
	case hasB64:
		d, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, invalid("data_base64 is not base64: %v", err)
		}
		e.Data = d
	case hasData:
		var s string
		if !isJSONContent(e.DataContentType) && data[0] == '"' && json.Unmarshal(data, &s) == nil {
			e.Data = []byte(s)
		} else {
			e.Data = append([]byte(nil), data...)
		}
	}
	for name, r := range raw {
		if coreNames[name] {
			continue
		}
		if !validExtensionName(name) {
			return nil, invalid("extension name %q: names are lower-case ASCII letters and digits", name)
		}
		var v any
		d := json.NewDecoder(bytes.NewReader(r))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, invalid("extension %s: %v", name, err)
		}
		var s string
		switch x := v.(type) {
		case nil:
			continue
		case string:
			s = x
		case json.Number:
			s = x.String()
		case bool:
			if x {
				s = "true"
			} else {
				s = "false"
			}
		default:
			return nil, invalid("extension %s is a JSON object or array; extension values are strings, numbers or booleans", name)
		}
		if e.Extensions == nil {
			e.Extensions = make(map[string]string)
		}
		e.Extensions[name] = s
	}
	if e.SpecVersion != SpecVersion {
		return nil, invalid("specversion %q is not supported (only %s)", e.SpecVersion, SpecVersion)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}

// isJSONContent reports whether data of content type ct is JSON: no
// content type, application/json, or a type with the +json suffix.
func isJSONContent(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// StructuredContentType is the content type of a structured-mode message
// that ToStructuredMessage writes.
const StructuredContentType = "application/cloudevents+json; charset=UTF-8"

// EncodeJSON encodes e in the JSON event format. Data is written as the
// "data" member verbatim when DataContentType is JSON (absent,
// application/json, text/json or a +json type) and Data is one JSON value
// that a reader gets back byte for byte (see verbatimJSON); otherwise as
// "data_base64". A nil Data writes neither. Extensions are written as
// JSON strings. DecodeJSON gives e back byte-exact, Data included. It
// returns an error matching ErrInvalidEvent when e is not valid.
func EncodeJSON(e *Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	member := func(name string, raw []byte) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(name)
		b.Write(k)
		b.WriteByte(':')
		b.Write(raw)
	}
	str := func(name, v string) {
		raw, _ := json.Marshal(v) // a string always marshals
		member(name, raw)
	}
	opt := func(name, v string) {
		if v != "" {
			str(name, v)
		}
	}
	str("specversion", SpecVersion)
	str("id", e.ID)
	str("source", e.Source)
	str("type", e.Type)
	opt("subject", e.Subject)
	if !e.Time.IsZero() {
		str("time", formatTime(e.Time))
	}
	opt("datacontenttype", e.DataContentType)
	opt("dataschema", e.DataSchema)
	names := make([]string, 0, len(e.Extensions))
	for name := range e.Extensions {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		str(name, e.Extensions[name])
	}
	if e.Data != nil {
		if isJSONContent(e.DataContentType) && verbatimJSON(e.Data) {
			member("data", e.Data)
		} else {
			str("data_base64", base64.StdEncoding.EncodeToString(e.Data))
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// verbatimJSON reports whether data can be the "data" member as it is
// and be read back byte for byte: valid JSON in valid UTF-8 (JSON text is
// UTF-8, and readers may replace invalid bytes), with no whitespace
// before or after the value, which a JSON reader drops with the space
// between members ("  {}\n" comes back as "{}"). Other data goes as
// data_base64.
func verbatimJSON(data []byte) bool {
	if len(data) == 0 || !json.Valid(data) || !utf8.Valid(data) {
		return false
	}
	space := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	return !space(data[0]) && !space(data[len(data)-1])
}

// ToStructuredMessage encodes e as a new message in structured content
// mode: the payload is EncodeJSON(e) and the backend's content type
// (Kafka's content-type header, AMQP's content-type property, NATS's
// Content-Type header, metadata "content-type" elsewhere) is
// StructuredContentType. The ID is e.ID and the Key the partitionkey
// extension, as in binary mode. Use it where consumers expect the whole
// event in the body, or on SQS when an event has more attributes than
// SQS carries as message attributes.
func (b Binding) ToStructuredMessage(e *Event) (*relay.Message, error) {
	if b.prefix == "" {
		return nil, errZeroBinding
	}
	doc, err := EncodeJSON(e)
	if err != nil {
		return nil, err
	}
	key := "content-type"
	switch b.name {
	case AMQP.name:
		key = metaAMQPContentType
	case NATS.name:
		key = "Content-Type"
	}
	return &relay.Message{ID: e.ID, Key: e.Extensions[ExtPartitionKey], Metadata: relay.Metadata{key: StructuredContentType}, Payload: doc}, nil
}
