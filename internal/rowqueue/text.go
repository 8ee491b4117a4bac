package rowqueue

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// ValidText reports why s cannot be stored in a text column of relay's
// tables (a NUL byte, invalid UTF-8), or "". Both databases are held to
// one rule so that rows read the same from any client.
func ValidText(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL byte"
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	return ""
}

// CheckText applies ValidText to m's ID, Key and metadata; store names
// what cannot hold it in the error ("PostgreSQL text").
func CheckText(m *relay.Message, store string) error {
	bad := func(what, s, why string) error {
		return &relay.LimitError{MessageID: m.ID, What: what,
			Detail: fmt.Sprintf("%.40q %s; %s cannot store it (put binary data in the payload)", s, why, store)}
	}
	if why := ValidText(m.ID); why != "" {
		return bad("message ID", m.ID, why)
	}
	if why := ValidText(m.Key); why != "" {
		return bad("key", m.Key, why)
	}
	for k, v := range m.Metadata {
		if why := ValidText(k); why != "" {
			return bad("metadata key", k, why)
		}
		if why := ValidText(v); why != "" {
			return bad("metadata value", v, why)
		}
	}
	return nil
}

// CheckTopic refuses a topic that ValidText refuses.
func CheckTopic(topic string) error {
	if why := ValidText(topic); why != "" {
		return fmt.Errorf("%w: %.40q %s", relay.ErrInvalidTopic, topic, why)
	}
	return nil
}

// CheckOutbox applies to a transactional outbox's batch what the shared
// publisher applies to a Publish call, since the outbox writes without
// it: a topic, no nil message, an ID for each (a UUIDv7 written into
// m.ID when empty), caps' size and delay limits, and CheckText with
// store.
func CheckOutbox(caps relay.Capabilities, store, topic string, msgs []*relay.Message) error {
	if topic == "" {
		return fmt.Errorf("%w: empty", relay.ErrInvalidTopic)
	}
	if err := CheckTopic(topic); err != nil {
		return err
	}
	now := time.Now()
	for i, m := range msgs {
		if m == nil {
			return relay.NilMessageError(i)
		}
		if m.ID == "" {
			m.ID = relay.NewID()
		}
		if err := driver.CheckSize(m, caps); err != nil {
			return err
		}
		if err := driver.CheckDelay(m, caps, now); err != nil {
			return err
		}
		if err := CheckText(m, store); err != nil {
			return err
		}
	}
	return nil
}
