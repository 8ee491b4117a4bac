package driver

import (
	"errors"
	"testing"

	"github.com/go-relay/relay"
)

func TestSizeError(t *testing.T) {
	m := relay.NewMessage(make([]byte, 100))
	m.ID = "m-1"
	if err := SizeError(m, 150, relay.Capabilities{MaxMessageBytes: 150}); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	for _, c := range []struct {
		limit           int
		what            string
		actual, payload int
		text            string
	}{
		{149, "message size", 150, 100, "relay: message m-1: message is 150 bytes encoded: payload 100, plus ID, key and metadata; limit 149, set by max_bytes="},
		{99, "payload", 100, 0, "relay: message m-1: payload is 100 bytes; limit 99, set by max_bytes="},
	} {
		err := SizeError(m, 150, relay.Capabilities{MaxMessageBytes: c.limit, MaxMessageBytesSetBy: "max_bytes="})
		var le *relay.LimitError
		if !errors.As(err, &le) || le.What != c.what || le.Limit != c.limit || le.Actual != c.actual || le.Payload != c.payload || le.MessageID != m.ID || le.SetBy != "max_bytes=" {
			t.Errorf("limit %d: %#v, want a %s LimitError", c.limit, err, c.what)
		}
		if err.Error() != c.text {
			t.Errorf("limit %d: %q, want %q", c.limit, err, c.text)
		}
		if !errors.Is(err, relay.ErrMessageTooLarge) {
			t.Errorf("limit %d: %v is not ErrMessageTooLarge", c.limit, err)
		}
	}
}

// No limit declared: nothing is refused.
func TestSizeErrorNoLimit(t *testing.T) {
	if err := SizeError(relay.NewMessage(make([]byte, 1<<20)), 1<<20, relay.Capabilities{}); err != nil {
		t.Errorf("SizeError without MaxMessageBytes = %v", err)
	}
}

// CheckSize counts payload, ID, key and metadata, and says so.
func TestCheckSizeWording(t *testing.T) {
	m := &relay.Message{ID: "0123456789", Key: "k", Payload: make([]byte, 20), Metadata: relay.Metadata{"type": "order-placed-v1-x"}}
	err := CheckSize(m, relay.Capabilities{MaxMessageBytes: 40})
	if want := "relay: message 0123456789: message is 52 bytes encoded: payload 20, plus ID, key and metadata; limit 40"; err == nil || err.Error() != want {
		t.Errorf("CheckSize = %v, want %s", err, want)
	}
	if err := CheckSize(m, relay.Capabilities{MaxMessageBytes: 10}); err == nil || err.Error() != "relay: message 0123456789: payload is 20 bytes; limit 10" {
		t.Errorf("CheckSize = %v", err)
	}
}
