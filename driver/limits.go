package driver

import (
	"fmt"
	"time"

	"github.com/go-relay/relay"
)

// Limit checks of messages about to be published, for the shared
// Publisher and for drivers that count size their own way.

// CheckDelay refuses a message whose DeliverAt (compared with now) the
// backend of caps cannot honour: ErrDelayUnsupported when it has no
// delayed delivery, a *relay.LimitError ("delivery delay", in whole
// seconds) beyond MaxDeliverDelay. A zero or past DeliverAt always passes.
func CheckDelay(m *relay.Message, caps relay.Capabilities, now time.Time) error {
	delay, ok := Delay(m, now)
	if !ok {
		return nil
	}
	if caps.DelayedDelivery == relay.DelayNone {
		return fmt.Errorf("relay/%s: message %s due in %v: %w", caps.Backend, m.ID, delay.Round(time.Millisecond), relay.ErrDelayUnsupported)
	}
	if caps.MaxDeliverDelay > 0 && delay > caps.MaxDeliverDelay {
		return &relay.LimitError{MessageID: m.ID, What: "delivery delay",
			Detail: fmt.Sprintf("due in %v, beyond the %s limit of %v", delay.Round(time.Second), caps.Backend, caps.MaxDeliverDelay)}
	}
	return nil
}

// Delay is how long from now m is to wait before delivery, and whether it
// is to wait at all (false for a zero or past DeliverAt). For drivers: a
// message with ok false is sent as usual.
func Delay(m *relay.Message, now time.Time) (delay time.Duration, ok bool) {
	if m.DeliverAt.IsZero() {
		return 0, false
	}
	delay = m.DeliverAt.Sub(now)
	return delay, delay > 0
}

// CheckSize applies the generic limits of caps to m: MaxMessageBytes over
// payload, ID, Key and metadata (see SizeError), and MaxMetadataKeys.
func CheckSize(m *relay.Message, caps relay.Capabilities) error {
	if caps.MaxMetadataKeys > 0 && len(m.Metadata) > caps.MaxMetadataKeys {
		return &relay.LimitError{MessageID: m.ID, What: "metadata keys", Limit: caps.MaxMetadataKeys, Actual: len(m.Metadata)}
	}
	return SizeError(m, EncodedSize(m), caps)
}

// SizeError is nil when caps has no MaxMessageBytes or size, m's size as
// the backend counts it, is within it; otherwise a *relay.LimitError that
// names what sets the limit (caps.MaxMessageBytesSetBy) and what was
// measured: the payload (Actual: the payload's length) when the payload
// alone exceeds the limit, else the message size (Actual: size, Payload:
// the payload's length). Every size limit of this module's adapters is
// reported through it, by CheckSize or by a MessageValidator that counts
// size its own way.
func SizeError(m *relay.Message, size int, caps relay.Capabilities) error {
	limit := caps.MaxMessageBytes
	if limit <= 0 || size <= limit {
		return nil
	}
	if len(m.Payload) > limit {
		return &relay.LimitError{MessageID: m.ID, What: "payload", Limit: limit, Actual: len(m.Payload), SetBy: caps.MaxMessageBytesSetBy}
	}
	return &relay.LimitError{MessageID: m.ID, What: "message size", Limit: limit, Actual: size, Payload: len(m.Payload), SetBy: caps.MaxMessageBytesSetBy}
}

// EncodedSize is the byte count of payload, ID, Key and metadata keys and values.
func EncodedSize(m *relay.Message) int {
	n := len(m.Payload) + len(m.ID) + len(m.Key)
	for k, v := range m.Metadata {
		n += len(k) + len(v)
	}
	return n
}
