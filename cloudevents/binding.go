package cloudevents

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-relay/relay"
)

// Binding is how one backend carries an event's attributes in relay
// metadata (binary content mode). The bindings are fixed: [Kafka], [AMQP],
// [NATS] follow the CloudEvents protocol bindings of those brokers, and
// [Generic] serves the backends that have none. A Binding is a value;
// it is safe for concurrent use.
type Binding struct {
	name   string
	prefix string
	// contentType is the metadata key that carries datacontenttype
	// unprefixed; "" means the prefixed attribute.
	contentType string
	// percent: values are percent-encoded (the NATS binding's rule).
	percent bool
	// omitIDKey: id and partitionkey travel only as the message ID and
	// Key (relay's own fields), not as attributes as well.
	omitIDKey bool
	// tombstone: an event without data is a NULL value (Kafka).
	tombstone bool
}

// metaTombstone is the kafka adapter's metadata key for a NULL record value
// (adapters/kafka.MetadataTombstone; not imported, to keep this package
// free of broker clients).
const metaTombstone = "kafka.tombstone"

// metaAMQPContentType is the amqp adapter's metadata key for the AMQP
// content-type property (adapters/amqp.MetaContentType).
const metaAMQPContentType = "amqp-content-type"

// The bindings.
var (
	// Kafka: attributes are headers "ce_<name>"; datacontenttype is the
	// "content-type" header; an event without data is a tombstone.
	Kafka = Binding{name: "kafka", prefix: "ce_", contentType: "content-type", tombstone: true}
	// AMQP: attributes are application properties (RabbitMQ headers)
	// "cloudEvents_<name>", the separator the binding prefers;
	// datacontenttype is the content-type property. Reading accepts
	// "cloudEvents:" as well.
	AMQP = Binding{name: "amqp", prefix: "cloudEvents_", contentType: metaAMQPContentType}
	// NATS: attributes are headers "ce-<name>", datacontenttype included,
	// with percent-encoded values.
	NATS = Binding{name: "nats", prefix: "ce-", percent: true}
	// Generic serves Redis Streams, SQS/SNS, PostgreSQL and mem://: the
	// NATS rules ("ce-<name>", percent-encoded values, so every value is
	// printable ASCII), except that id and partitionkey are carried only
	// by the message ID and Key, which these backends store in fields of
	// their own. On SQS that keeps two attributes of the ten free.
	Generic = Binding{name: "generic", prefix: "ce-", percent: true, omitIDKey: true}
)

// Name is the binding's name: "kafka", "amqp", "nats" or "generic".
func (b Binding) Name() string { return b.name }

// Prefix is the prefix of the attributes' metadata keys when writing.
func (b Binding) Prefix() string { return b.prefix }

// BindingFor returns the binding of a backend, as named by
// relay.Capabilities.Backend: Kafka for "kafka", AMQP for "amqp", NATS for
// "nats", and Generic for every other backend.
func BindingFor(backend string) Binding {
	switch backend {
	case "kafka":
		return Kafka
	case "amqp":
		return AMQP
	case "nats":
		return NATS
	}
	return Generic
}

// BindingOf returns the binding for what p or s reports in Capabilities
// (Generic when it reports none).
func BindingOf(v any) Binding {
	if cr, ok := v.(relay.CapabilityReporter); ok {
		return BindingFor(cr.Capabilities().Backend)
	}
	return Generic
}

// ToMessage encodes e as a new message in binary content mode: the ID is
// e.ID, the Key is the partitionkey extension, the payload is e.Data (not
// copied) and every attribute is a metadata entry. It returns an error
// matching ErrInvalidEvent when e is not valid. It does not modify e.
func (b Binding) ToMessage(e *Event) (*relay.Message, error) {
	if b.prefix == "" {
		return nil, errZeroBinding
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	md := make(relay.Metadata, 8+len(e.Extensions))
	put := func(name, v string) {
		if b.percent {
			v = percentEncode(v)
		}
		md[b.prefix+name] = v
	}
	opt := func(name, v string) {
		if v != "" {
			put(name, v)
		}
	}
	put("specversion", SpecVersion)
	if !b.omitIDKey {
		put("id", e.ID)
	}
	put("source", e.Source)
	put("type", e.Type)
	opt("subject", e.Subject)
	opt("dataschema", e.DataSchema)
	if !e.Time.IsZero() {
		put("time", formatTime(e.Time))
	}
	if e.DataContentType != "" {
		if b.contentType != "" {
			md[b.contentType] = e.DataContentType
		} else {
			put("datacontenttype", e.DataContentType)
		}
	}
	for name, v := range e.Extensions {
		if name == ExtPartitionKey && b.omitIDKey {
			continue
		}
		put(name, v)
	}
	if b.tombstone && e.Data == nil {
		md[metaTombstone] = "true"
	}
	return &relay.Message{ID: e.ID, Key: e.Extensions[ExtPartitionKey], Metadata: md, Payload: e.Data}, nil
}

var errZeroBinding = errors.New("relay/cloudevents: zero Binding; use Kafka, AMQP, NATS, Generic or BindingFor")

// reader is how attributes are read under one prefix.
type reader struct {
	prefix      string
	contentType string // metadata key of datacontenttype, "" = prefixed only
	percent     bool
	fromIDKey   bool // id and partitionkey default to the message ID and Key
}

// readers, in the order FromMessage tries them.
var readers = [...]reader{
	{prefix: Kafka.prefix, contentType: Kafka.contentType},
	{prefix: AMQP.prefix, contentType: AMQP.contentType},
	{prefix: "cloudEvents:", contentType: AMQP.contentType},
	// The NATS binding puts datacontenttype in ce-datacontenttype; a
	// Content-Type header (as the HTTP binding has it) is read when that
	// is absent.
	{prefix: NATS.prefix, contentType: "content-type", percent: true, fromIDKey: true},
}

// FromMessage decodes the event m carries, whichever backend delivered it
// and whichever binding wrote it:
//
//   - structured content mode: a content type (metadata "content-type"
//     in any case, or "amqp-content-type") of application/cloudevents+json
//     means the payload is the event in the JSON event format (another
//     application/cloudevents+... format is an error matching
//     ErrUnsupportedFormat);
//   - binary content mode: the prefix under which the specversion
//     attribute is found ("ce_", "cloudEvents_", "cloudEvents:" or "ce-",
//     matched in any case) says how the other attributes are read.
//
// A message with neither gives an error matching ErrNotCloudEvent; one
// whose attributes break the specification, ErrInvalidEvent. Metadata
// that is not an attribute is ignored. The event's Data is m.Payload (not
// copied). Under "ce-", a missing id or partitionkey attribute is taken
// from m.ID and m.Key (the Generic binding writes them there only), and a
// missing ce-datacontenttype from metadata "content-type" (any case).
// FromMessage does not modify m and is safe for concurrent use.
func FromMessage(m *relay.Message) (*Event, error) {
	if ct, ok := structuredType(m.Metadata); ok {
		if !isJSONFormat(ct) {
			return nil, fmt.Errorf("%w: %q", ErrUnsupportedFormat, ct)
		}
		return DecodeJSON(m.Payload)
	}
	var found *reader
	for i := range readers {
		r := &readers[i]
		if _, ok := lookupFold(m.Metadata, r.prefix+"specversion"); !ok {
			continue
		}
		if found != nil {
			return nil, invalid("attributes under two prefixes, %q and %q; publish a fresh message rather than a copy of one encoded for another binding", found.prefix, r.prefix)
		}
		found = r
	}
	if found == nil {
		return nil, ErrNotCloudEvent
	}
	return found.decode(m)
}

// ErrUnsupportedFormat is matched by the error of FromMessage for a
// structured-mode message in an event format other than JSON.
var ErrUnsupportedFormat = errors.New("relay/cloudevents: unsupported event format")

// structuredType returns the content type of m when it names a
// CloudEvents event format (application/cloudevents...).
func structuredType(md relay.Metadata) (string, bool) {
	for k, v := range md {
		if k == metaAMQPContentType || strings.EqualFold(k, "content-type") {
			if len(v) >= len(mediaPrefix) && strings.EqualFold(v[:len(mediaPrefix)], mediaPrefix) {
				return v, true
			}
		}
	}
	return "", false
}

const mediaPrefix = "application/cloudevents"

// isJSONFormat reports whether ct is application/cloudevents+json, with
// or without parameters.
func isJSONFormat(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), mediaPrefix+"+json")
}

// lookupFold finds key in md, exactly or else in any case.
func lookupFold(md relay.Metadata, key string) (string, bool) {
	if v, ok := md[key]; ok {
		return v, true
	}
	for k, v := range md {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}

func (r *reader) decode(m *relay.Message) (*Event, error) {
	e := &Event{Data: m.Payload}
	seen := make(map[string]bool, len(m.Metadata))
	hasCT := false
	for k, v := range m.Metadata {
		if len(k) <= len(r.prefix) || !strings.EqualFold(k[:len(r.prefix)], r.prefix) {
			continue
		}
		name := strings.ToLower(k[len(r.prefix):])
		if seen[name] {
			return nil, invalid("attribute %s appears twice (metadata keys differ only in case)", name)
		}
		seen[name] = true
		if r.percent {
			d, err := headerDecode(v)
			if err != nil {
				return nil, invalid("attribute %s: %v", name, err)
			}
			v = d
		}
		switch name {
		case "specversion":
			e.SpecVersion = v
		case "id":
			e.ID = v
		case "source":
			e.Source = v
		case "type":
			e.Type = v
		case "subject":
			e.Subject = v
		case "dataschema":
			e.DataSchema = v
		case "datacontenttype":
			e.DataContentType, hasCT = v, true
		case "time":
			t, err := parseTime(v)
			if err != nil {
				return nil, err
			}
			e.Time = t
		case "data", "data_base64":
			return nil, invalid("attribute %s is not allowed in binary mode", name)
		default:
			if !validExtensionName(name) {
				return nil, invalid("extension name %q: names are lower-case ASCII letters and digits", name)
			}
			if e.Extensions == nil {
				e.Extensions = make(map[string]string)
			}
			e.Extensions[name] = v
		}
	}
	if r.contentType != "" && !hasCT {
		if ct, ok := lookupFold(m.Metadata, r.contentType); ok {
			e.DataContentType = ct
		}
	}
	if r.fromIDKey {
		if e.ID == "" {
			e.ID = m.ID
		}
		if _, ok := e.Extensions[ExtPartitionKey]; !ok && m.Key != "" {
			if e.Extensions == nil {
				e.Extensions = make(map[string]string)
			}
			e.Extensions[ExtPartitionKey] = m.Key
		}
	}
	if m.Metadata[metaTombstone] == "true" && len(m.Payload) == 0 {
		e.Data = nil
	}
	if e.SpecVersion != SpecVersion {
		return nil, invalid("specversion %q is not supported (only %s)", e.SpecVersion, SpecVersion)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}
