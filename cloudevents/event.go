package cloudevents

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// SpecVersion is the CloudEvents specification version this package reads
// and writes.
const SpecVersion = "1.0"

// ExtPartitionKey is the partitioning extension's attribute; it maps to
// the relay message Key (the Kafka record key, the SQS FIFO group, the
// AMQP routing key).
const ExtPartitionKey = "partitionkey"

// Event is one CloudEvent. Optional attributes are absent when they are
// "" (or, for Time, the zero time).
type Event struct {
	ID          string // required
	Source      string // required, a URI-reference
	SpecVersion string // "" is written as SpecVersion; only "1.0" is accepted
	Type        string // required
	Subject     string
	// Time is written in RFC 3339 in UTC with as many fractional digits as
	// it needs; a received time keeps the offset it was written with.
	Time            time.Time
	DataContentType string
	DataSchema      string // a URI
	// Extensions are the extension attributes in their canonical string
	// form (an Integer as decimal text, a Boolean as "true" or "false", a
	// Timestamp in RFC 3339, a Binary in base64). Names are lower-case
	// ASCII letters and digits. ExtPartitionKey is one of them.
	Extensions map[string]string
	// Data is the event data, byte-exact. A nil Data is an event without
	// data; on Kafka it is written as a NULL record value (a tombstone),
	// as the Kafka binding says. Elsewhere nil and empty data look alike
	// on the wire and are received as empty data.
	Data []byte
}

// ErrNotCloudEvent is matched by the error of FromMessage for a message
// that carries no CloudEvent: no specversion attribute under any
// binding's prefix, and no structured content type.
var ErrNotCloudEvent = errors.New("relay/cloudevents: not a CloudEvent")

// ErrInvalidEvent is matched by every error about an event that breaks the
// specification (a missing required attribute, a bad extension name, a
// value that does not parse), when encoding and when decoding.
var ErrInvalidEvent = errors.New("relay/cloudevents: invalid event")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidEvent}, args...)...)
}

// core attribute names (besides data): never extension names.
var coreNames = map[string]bool{
	"id": true, "source": true, "specversion": true, "type": true, "subject": true,
	"time": true, "datacontenttype": true, "dataschema": true, "data": true, "data_base64": true,
}

// validExtensionName reports whether name is lower-case ASCII letters and
// digits, as the specification requires of attribute names.
func validExtensionName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Validate reports why e is not a valid CloudEvent 1.0, or nil. Encoding
// calls it.
func (e *Event) Validate() error {
	if e == nil {
		return invalid("the event is nil")
	}
	if e.SpecVersion != "" && e.SpecVersion != SpecVersion {
		return invalid("specversion %q is not supported (only %s)", e.SpecVersion, SpecVersion)
	}
	for _, a := range [...]struct{ name, v string }{{"id", e.ID}, {"source", e.Source}, {"type", e.Type}} {
		if a.v == "" {
			return invalid("required attribute %s is empty", a.name)
		}
	}
	check := func(name, v string) error {
		if !utf8.ValidString(v) {
			return invalid("attribute %s is not valid UTF-8", name)
		}
		return nil
	}
	for _, a := range [...]struct{ name, v string }{
		{"id", e.ID}, {"source", e.Source}, {"type", e.Type}, {"subject", e.Subject},
		{"datacontenttype", e.DataContentType}, {"dataschema", e.DataSchema},
	} {
		if err := check(a.name, a.v); err != nil {
			return err
		}
	}
	for name, v := range e.Extensions {
		if !validExtensionName(name) {
			return invalid("extension name %q: names are lower-case ASCII letters and digits", name)
		}
		if coreNames[name] {
			return invalid("extension name %q is a core attribute", name)
		}
		if err := check(name, v); err != nil {
			return err
		}
	}
	return nil
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid("attribute time %q is not an RFC 3339 timestamp", s)
	}
	return t, nil
}
