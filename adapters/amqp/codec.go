package amqp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/uuid"
)

// Wire format.
//
//   - Message.ID is the message_id property.
//   - Message.Key is the routing key. Copies that relay republishes (Nack,
//     NackAfter) are routed to a queue by name, so they carry the key in the
//     header x-relay-key, which wins over the routing key when present.
//   - Metadata entries are string headers, except the keys of
//     propertyKeys, which map to the AMQP properties of the same meaning.
//   - Payload is the body. Messages are persistent (delivery_mode 2). A nil
//     and an empty Payload are the same on the wire: a content header with
//     body size 0 and no body frame (AMQP has no absent body); both are
//     delivered as a non-nil empty Payload.
//
// Headers whose names start with x-relay- are relay's own and are not
// Metadata; publishing such a key is refused.
const (
	headerPrefix  = "x-relay-"
	headerKey     = "x-relay-key"
	headerAttempt = "x-relay-attempt" // attempt number of the copy's next delivery
)

// Metadata keys that map to AMQP basic properties (both directions).
const (
	MetaContentType     = "amqp-content-type"
	MetaContentEncoding = "amqp-content-encoding"
	// MetaCorrelationID and MetaReplyTo are relay's portable request/reply
	// keys (package reqreply), so that relay requesters and servers
	// interoperate with plain AMQP clients.
	MetaCorrelationID = relay.MetaCorrelationID
	MetaReplyTo       = relay.MetaReplyTo
	MetaType          = "amqp-type"
	MetaAppID         = "amqp-app-id"
)

// Metadata keys set on delivery from properties that relay does not
// publish (read-only; published back they travel as plain headers).
const (
	MetaTimestamp  = "amqp-timestamp" // RFC 3339, UTC
	MetaPriority   = "amqp-priority"
	MetaUserID     = "amqp-user-id"
	MetaExpiration = "amqp-expiration"
)

var propertyKeys = map[string]bool{
	MetaContentType: true, MetaContentEncoding: true, MetaCorrelationID: true,
	MetaReplyTo: true, MetaType: true, MetaAppID: true,
}

// shortstrMax is the AMQP limit for routing keys, message IDs, header
// names, names and the mapped properties.
const shortstrMax = 255

// encode turns m into a Publishing. It does not copy the payload.
func encode(m *relay.Message) amqp091.Publishing {
	p := amqp091.Publishing{
		MessageId:    m.ID,
		DeliveryMode: amqp091.Persistent,
		Body:         m.Payload,
	}
	if len(m.Metadata) > 0 {
		h := make(amqp091.Table, len(m.Metadata))
		for k, v := range m.Metadata {
			switch k {
			case MetaContentType:
				p.ContentType = v
			case MetaContentEncoding:
				p.ContentEncoding = v
			case MetaCorrelationID:
				p.CorrelationId = v
			case MetaReplyTo:
				p.ReplyTo = v
			case MetaType:
				p.Type = v
			case MetaAppID:
				p.AppId = v
			default:
				h[k] = v
			}
		}
		if len(h) > 0 {
			p.Headers = h
		}
	}
	return p
}

// validateMessage checks the AMQP limits of m (beyond the size limit).
func validateMessage(m *relay.Message) error {
	if len(m.ID) > shortstrMax {
		return &relay.LimitError{MessageID: m.ID, What: "id", Limit: shortstrMax, Actual: len(m.ID)}
	}
	if len(m.Key) > shortstrMax {
		return &relay.LimitError{MessageID: m.ID, What: "key", Limit: shortstrMax, Actual: len(m.Key)}
	}
	for k, v := range m.Metadata {
		if len(k) > shortstrMax {
			return &relay.LimitError{MessageID: m.ID, What: "metadata key", Limit: shortstrMax, Actual: len(k)}
		}
		if strings.HasPrefix(k, headerPrefix) {
			return &relay.LimitError{MessageID: m.ID, What: "metadata key", Detail: fmt.Sprintf("%q: the prefix %s is reserved for relay's own headers", k, headerPrefix)}
		}
		if k == headerDue {
			return &relay.LimitError{MessageID: m.ID, What: "metadata key", Detail: fmt.Sprintf("%q is reserved: relay's due exchange routes delayed messages on it", k)}
		}
		if propertyKeys[k] && len(v) > shortstrMax {
			return &relay.LimitError{MessageID: m.ID, What: "metadata value", Detail: fmt.Sprintf("%q maps to an AMQP property of at most %d bytes; it has %d", k, shortstrMax, len(v))}
		}
	}
	return nil
}

// decoded is what a delivery means to relay.
type decoded struct {
	msg *relay.Message
	// base is the attempt number carried by the message (x-relay-attempt,
	// default 1); the broker's count of redeliveries is added to it.
	base int
	// count is the broker's delivery count (x-delivery-count) or -1.
	count int
}

// decode never fails: headers of any type become strings, a missing
// message_id is derived from the delivery's content. isDelayQueue tells
// relay's own delay queues, whose dead-lettering traces are hidden.
func decode(d *amqp091.Delivery, isDelayQueue func(string) bool) decoded {
	out := decoded{base: 1, count: -1}
	m := &relay.Message{ID: d.MessageId, Key: d.RoutingKey, Payload: d.Body}
	if m.Payload == nil {
		// AMQP has no absent body; an empty one reads as a present,
		// empty payload whatever the client library hands over.
		m.Payload = []byte{}
	}
	if m.ID == "" {
		m.ID = derivedID(d)
	}
	var md relay.Metadata
	set := func(k, v string) {
		if md == nil {
			md = make(relay.Metadata, len(d.Headers)+2)
		}
		md[k] = v
	}
	hideDeaths := hiddenDeaths(d.Headers, isDelayQueue)
	for k, v := range d.Headers {
		switch {
		case k == headerKey:
			m.Key = stringify(v)
			continue
		case k == headerAttempt:
			if n, err := strconv.Atoi(stringify(v)); err == nil && n > 0 {
				out.base = n
			}
			continue
		case strings.HasPrefix(k, headerPrefix) || k == headerDue:
			continue
		case k == "x-delivery-count":
			if n, ok := toInt(v); ok {
				// set by a quorum queue: it is the Attempt, not metadata
				out.count = n
				continue
			}
		case k == "x-death":
			if hideDeaths != nil {
				v = hideDeaths(v)
				if v == nil {
					continue
				}
			}
		case strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-"):
			if hideDeaths != nil && deathHeaderIsOurs(d.Headers, k, isDelayQueue) {
				continue
			}
		}
		set(k, stringify(v))
	}
	prop := func(k, v string) {
		if v == "" {
			return
		}
		if _, dup := md[k]; !dup {
			set(k, v)
		}
	}
	prop(MetaContentType, d.ContentType)
	prop(MetaContentEncoding, d.ContentEncoding)
	prop(MetaCorrelationID, d.CorrelationId)
	prop(MetaReplyTo, d.ReplyTo)
	prop(MetaType, d.Type)
	prop(MetaAppID, d.AppId)
	prop(MetaUserID, d.UserId)
	if !d.Timestamp.IsZero() {
		prop(MetaTimestamp, d.Timestamp.UTC().Format(time.RFC3339))
	}
	if d.Priority != 0 {
		prop(MetaPriority, strconv.Itoa(int(d.Priority)))
	}
	prop(MetaExpiration, d.Expiration)
	m.Metadata = md
	out.msg = m
	return out
}

// hiddenDeaths returns a filter for the x-death header that removes the
// entries of relay's delay queues, or nil when there is nothing to hide.
func hiddenDeaths(h amqp091.Table, isDelayQueue func(string) bool) func(any) any {
	if isDelayQueue == nil {
		return nil
	}
	deaths, ok := h["x-death"].([]any)
	if !ok {
		return nil
	}
	ours := false
	for _, e := range deaths {
		if t, ok := e.(amqp091.Table); ok {
			if q, _ := t["queue"].(string); isDelayQueue(q) {
				ours = true
				break
			}
		}
	}
	if !ours {
		return nil
	}
	return func(v any) any {
		deaths := v.([]any)
		kept := make([]any, 0, len(deaths))
		for _, e := range deaths {
			if t, ok := e.(amqp091.Table); ok {
				if q, _ := t["queue"].(string); isDelayQueue(q) {
					continue
				}
			}
			kept = append(kept, e)
		}
		if len(kept) == 0 {
			return nil
		}
		return kept
	}
}

func deathHeaderIsOurs(h amqp091.Table, k string, isDelayQueue func(string) bool) bool {
	prefix := "x-first-death-"
	if strings.HasPrefix(k, "x-last-death-") {
		prefix = "x-last-death-"
	}
	q, _ := h[prefix+"queue"].(string)
	return isDelayQueue(q)
}

// cleanHeaders returns a copy of h for a republished copy: relay's own
// headers, the broker's delivery count and the traces of relay's delay
// queues are removed.
func cleanHeaders(h amqp091.Table, isDelayQueue func(string) bool) amqp091.Table {
	out := make(amqp091.Table, len(h)+2)
	hide := hiddenDeaths(h, isDelayQueue)
	for k, v := range h {
		switch {
		case strings.HasPrefix(k, headerPrefix):
			continue
		case k == "x-delivery-count":
			if _, ok := toInt(v); ok {
				continue
			}
		case k == "x-death" && hide != nil:
			if v = hide(v); v == nil {
				continue
			}
		case (strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")) && hide != nil:
			if deathHeaderIsOurs(h, k, isDelayQueue) {
				continue
			}
		}
		out[k] = v
	}
	return out
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int8:
		return int(n), true
	case int16:
		return int(n), true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case uint8:
		return int(n), true
	case uint16:
		return int(n), true
	case uint32:
		return int(n), true
	case uint64:
		return int(n), true
	}
	return 0, false
}

// stringify renders any AMQP field value as a string: strings and byte
// arrays as they are, numbers in decimal, booleans as true/false,
// timestamps in RFC 3339 (UTC), decimals as decimal text, and tables and
// arrays as JSON (keys sorted) built from the same rules.
func stringify(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp091.Decimal:
		return decimalString(x)
	case amqp091.Table, []any:
		b, err := json.Marshal(plain(x))
		if err != nil {
			return fmt.Sprint(x)
		}
		return string(b)
	}
	if n, ok := toInt(v); ok {
		return strconv.Itoa(n)
	}
	return fmt.Sprint(v)
}

// plain converts nested AMQP values into JSON-friendly ones.
func plain(v any) any {
	switch x := v.(type) {
	case amqp091.Table:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = plain(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = plain(e)
		}
		return s
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return x // base64 in JSON
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp091.Decimal:
		return decimalString(x)
	case float32:
		return float64(x)
	}
	return v
}

func decimalString(d amqp091.Decimal) string {
	neg := d.Value < 0
	digits := strconv.FormatInt(int64(d.Value), 10)
	if neg {
		digits = digits[1:]
	}
	scale := int(d.Scale)
	if scale > 0 {
		for len(digits) <= scale {
			digits = "0" + digits
		}
		digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// derivedID is the ID of a delivery without message_id: a UUID (version 8)
// from a SHA-256 of its exchange, routing key, properties, publisher headers
// and body, so that every redelivery of it gets the same ID. Identical
// messages from such a publisher therefore share an ID.
func derivedID(d *amqp091.Delivery) string {
	h := sha256.New()
	field := func(s string) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(d.Exchange)
	field(d.RoutingKey)
	if k, ok := d.Headers[headerKey]; ok {
		field(stringify(k))
	}
	field(d.ContentType)
	field(d.ContentEncoding)
	field(d.CorrelationId)
	field(d.ReplyTo)
	field(d.Type)
	field(d.AppId)
	field(d.UserId)
	if !d.Timestamp.IsZero() {
		field(d.Timestamp.UTC().Format(time.RFC3339))
	}
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		if strings.HasPrefix(k, headerPrefix) || k == "x-delivery-count" || k == "x-death" ||
			strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue // added by the broker or by relay on redelivery
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field(k)
		field(stringify(d.Headers[k]))
	}
	h.Write(d.Body)
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return uuid.String(u)
}
