package relay

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Adapters wrap them with %w so callers test with errors.Is.
var (
	// ErrClosed is returned by operations on a Publisher or Subscriber after Close.
	ErrClosed = errors.New("relay: closed")
	// ErrUnknownScheme is returned by OpenPublisher/OpenSubscriber for a URL
	// scheme no imported adapter registered.
	ErrUnknownScheme = errors.New("relay: unknown URL scheme")
	// ErrBadURL is matched by every *URLError.
	ErrBadURL = errors.New("relay: bad URL")
	// ErrAlreadySettled is returned when a message is settled in the opposite
	// way to an earlier settlement (Ack after Nack or Nack after Ack).
	ErrAlreadySettled = errors.New("relay: message already settled the other way")
	// ErrSubscriptionEnded is returned when a message is settled after its
	// subscription ended (ctx done or Close). The broker redelivers it.
	ErrSubscriptionEnded = errors.New("relay: subscription ended")
	// ErrLimit is matched by every *LimitError.
	ErrLimit = errors.New("relay: broker limit exceeded")
	// ErrMessageTooLarge is matched by a *LimitError about payload or total size.
	ErrMessageTooLarge = errors.New("relay: message too large")
	// ErrNotSupported is returned for an operation the backend cannot perform.
	ErrNotSupported = errors.New("relay: not supported by this backend")
	// ErrDelayUnsupported: a message with a DeliverAt in the future was
	// published to a backend without delayed delivery
	// (Capabilities.DelayedDelivery is DelayNone). It wraps ErrNotSupported.
	ErrDelayUnsupported = fmt.Errorf("%w: delayed delivery (Message.DeliverAt)", ErrNotSupported)
	// ErrInvalidTopic is returned for an empty or malformed topic name.
	ErrInvalidTopic = errors.New("relay: invalid topic name")
	// ErrFenced is matched by the error of a session the broker fenced:
	// its work now belongs to another member (a Kafka transactional
	// producer whose transaction timed out during a pause, or that a
	// newer client replaced), so it can neither commit nor publish again.
	// The session must be closed; a new one (a new producer epoch, a new
	// group membership) may carry on, unless the error also matches
	// ErrTakenOver.
	ErrFenced = errors.New("relay: fenced")
	// ErrTakenOver wraps ErrFenced: a live client with this one's identity
	// (a Kafka transactional_id) replaced it. Opening a new session would
	// fence that client in turn: two running instances share an identity
	// that must be unique.
	ErrTakenOver = fmt.Errorf("%w: taken over by another client with the same identity", ErrFenced)
	// ErrNilMessage is matched by the error Publish and PublishAsync
	// return for a batch that holds a nil *Message; the error names the
	// message's index, and nothing of the batch is sent.
	ErrNilMessage = errors.New("relay: nil message")
)

// NilMessageError returns the error for a nil *Message at index i of a
// batch given to Publish: it matches ErrNilMessage and names i. Publishers,
// and wrappers of publishers, return it before sending anything of the
// batch.
func NilMessageError(i int) error {
	return fmt.Errorf("%w at index %d of the batch; nothing of the batch was sent", ErrNilMessage, i)
}

// URLError reports a URL that cannot be opened. URL is redacted (no password).
type URLError struct {
	URL    string // the redacted URL
	Param  string // the offending query parameter, if any
	Reason string
}

func (e *URLError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("relay: bad URL %q: parameter %q: %s", e.URL, e.Param, e.Reason)
	}
	return fmt.Sprintf("relay: bad URL %q: %s", e.URL, e.Reason)
}

// Is makes errors.Is(err, ErrBadURL) true.
func (e *URLError) Is(target error) bool { return target == ErrBadURL }

// LimitError reports a message that a broker limit rejects at publish time.
// Nothing is sent for a Publish call that returns it.
type LimitError struct {
	MessageID string // the offending message
	What      string // "payload", "message size", "metadata keys", "metadata key", "topic", ...
	Limit     int    // the limit, when numeric
	Actual    int    // the value that exceeded it, when numeric
	Detail    string // extra explanation, when the limit is not numeric
	// Payload is the payload's byte count within Actual, for What
	// "message size" (Actual is then the whole encoded message).
	Payload int
	// SetBy names what sets Limit, when known: a URL parameter
	// ("max_bytes=", with its ceiling) or a broker setting ("the NATS
	// server's max_payload"); see Capabilities.MaxMessageBytesSetBy.
	SetBy string
}

// Error says what was measured and, when SetBy is known, what sets the
// limit. For the size limits, in bytes:
//
//	relay: message ID: payload is 20 bytes; limit 10, set by max_bytes=
//	relay: message ID: message is 56 bytes encoded: payload 20, plus ID, key and metadata; limit 10, set by max_bytes=
func (e *LimitError) Error() string {
	setBy := ""
	if e.SetBy != "" {
		setBy = ", set by " + e.SetBy
	}
	switch {
	case e.Detail != "":
		return fmt.Sprintf("relay: message %s: %s: %s", e.MessageID, e.What, e.Detail)
	case e.What == "payload":
		return fmt.Sprintf("relay: message %s: payload is %d bytes; limit %d%s", e.MessageID, e.Actual, e.Limit, setBy)
	case e.What == "message size":
		return fmt.Sprintf("relay: message %s: message is %d bytes encoded: payload %d, plus ID, key and metadata; limit %d%s",
			e.MessageID, e.Actual, e.Payload, e.Limit, setBy)
	}
	return fmt.Sprintf("relay: message %s: %s is %d; limit %d%s", e.MessageID, e.What, e.Actual, e.Limit, setBy)
}

// Is matches ErrLimit always and ErrMessageTooLarge for size limits.
func (e *LimitError) Is(target error) bool {
	switch target {
	case ErrLimit:
		return true
	case ErrMessageTooLarge:
		return e.What == "payload" || e.What == "message size"
	}
	return false
}

// MessageFailure names one message a Publish call could not deliver.
type MessageFailure struct {
	ID  string
	Err error
}

// PublishError is returned by Publish when some messages of a batch were
// accepted and others were not. Failed lists those not confirmed by the
// broker; every message not listed was accepted.
type PublishError struct {
	Failed []MessageFailure
}

func (e *PublishError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "relay: %d message(s) not published", len(e.Failed))
	for i, f := range e.Failed {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-3)
			break
		}
		fmt.Fprintf(&b, "; %s: %v", f.ID, f.Err)
	}
	return b.String()
}

// Unwrap exposes the individual failures to errors.Is and errors.As.
func (e *PublishError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}

// FailedIDs returns the IDs of the messages that were not published.
func (e *PublishError) FailedIDs() []string {
	ids := make([]string, len(e.Failed))
	for i, f := range e.Failed {
		ids[i] = f.ID
	}
	return ids
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: retry middleware gives up at
// once and poison-queue middleware routes the message immediately.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
