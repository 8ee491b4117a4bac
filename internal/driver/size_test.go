package driver

import (
	"errors"
	"testing"

	"github.com/go-relay/relay"
)

func TestSizeError(t *testing.T) {
	m := relay.NewMessage(make([]byte, 100))
	if err := SizeError(m, 150, 150); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	for _, c := range []struct {
		limit int
		what  string
	}{{149, "message size"}, {99, "payload"}} {
		err := SizeError(m, 150, c.limit)
		var le *relay.LimitError
		if !errors.As(err, &le) || le.What != c.what || le.Limit != c.limit || le.Actual != 150 || le.MessageID != m.ID {
			t.Errorf("limit %d: %#v, want a %s LimitError", c.limit, err, c.what)
		}
		if !errors.Is(err, relay.ErrMessageTooLarge) {
			t.Errorf("limit %d: %v is not ErrMessageTooLarge", c.limit, err)
		}
	}
}
