package relay

import (
	"context"
	"time"
)

// Metadata holds string headers. Keys and values round-trip exactly through
// every backend; an adapter packs what its broker cannot carry natively.
type Metadata map[string]string

// Get returns the value of key, or "" when it is absent or m is nil.
func (m Metadata) Get(key string) string { return m[key] }

// Clone returns an independent copy (nil for an empty map).
func (m Metadata) Clone() Metadata {
	if len(m) == 0 {
		return nil
	}
	c := make(Metadata, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Message is the unit of publishing and delivery.
//
// The exported fields are what crosses the wire. A message obtained from a
// Subscriber also carries delivery state (topic, attempt, context and its
// settlement), reached through the methods.
type Message struct {
	// ID is unique per message; NewMessage sets a time-ordered UUIDv7.
	// It is preserved end to end, including across bridges.
	ID string
	// Key is the ordering and partitioning key ("" = none): the Kafka record
	// key, the SQS FIFO message group, the AMQP routing key.
	Key string
	// Metadata are string headers.
	Metadata Metadata
	// Payload is opaque and round-trips byte-exact. Nil and empty are equal.
	Payload []byte
	// DeliverAt, when later than the time of Publish, asks for delayed
	// delivery: no subscriber receives the message before DeliverAt, and
	// it is delivered (at least once) after it, even if every process
	// involved restarts in between. The zero time, or a time already
	// passed, means now. How a backend keeps the message, and how far
	// ahead it may be, is Capabilities.DelayedDelivery and
	// MaxDeliverDelay; a Publish the backend cannot honour fails with
	// ErrDelayUnsupported or a *LimitError, sending nothing.
	//
	// DeliverAt is an instruction to the publisher, not part of the
	// message: a delivered message has it zero.
	DeliverAt time.Time

	d *delivery
}

// NewMessage returns a message with a fresh UUIDv7 ID and the given payload.
func NewMessage(payload []byte) *Message {
	return &Message{ID: NewID(), Payload: payload}
}

// Copy returns a new, undelivered message with the same ID, Key, a copy of
// Metadata and a copy of Payload. Use it to publish a received message again.
func (m *Message) Copy() *Message {
	var p []byte
	if len(m.Payload) > 0 {
		p = append([]byte(nil), m.Payload...)
	}
	return &Message{ID: m.ID, Key: m.Key, Metadata: m.Metadata.Clone(), Payload: p, DeliverAt: m.DeliverAt}
}

// DeliverAfter sets DeliverAt to now plus delay (a delay of 0 or less
// clears it) and returns m, for chaining:
//
//	pub.Publish(ctx, "reminders", relay.NewMessage(body).DeliverAfter(10*time.Minute))
func (m *Message) DeliverAfter(delay time.Duration) *Message {
	if delay <= 0 {
		m.DeliverAt = time.Time{}
	} else {
		m.DeliverAt = time.Now().Add(delay)
	}
	return m
}

// Topic is the topic the message was received from ("" if not delivered).
func (m *Message) Topic() string {
	if m.d == nil {
		return ""
	}
	return m.d.src.topic
}

// Attempt is 1 on the first delivery and grows with each redelivery, taken
// from the broker's delivery count where it has one. It is 0 on a message
// that was not delivered by a Subscriber.
func (m *Message) Attempt() int {
	if m.d == nil {
		return 0
	}
	return m.d.attempt
}

// Context is derived from the Subscribe ctx and is done once the message is
// settled or its subscription ends. It is context.Background() for a message
// that was not delivered.
func (m *Message) Context() context.Context {
	if m.d == nil {
		return context.Background()
	}
	return m.d.context()
}

// Ack settles the message as processed: it is never redelivered to this
// group. Ack does not wait for the broker; it is safe from any goroutine
// and never panics. On a message that was not delivered it does nothing
// and returns nil.
//
// The first settlement of a message wins, and later ones never reach the
// broker:
//   - settling the same way again (Ack after Ack; Nack or NackAfter after
//     Nack or NackAfter) returns nil and changes nothing; in particular a
//     second NackAfter does not change the delay of the first;
//   - settling the other way (Ack after a Nack, Nack after an Ack) returns
//     ErrAlreadySettled;
//   - settling a message that was still unsettled when its subscription
//     ended returns ErrSubscriptionEnded (the message was released to the
//     group and will be redelivered).
func (m *Message) Ack() error { return m.settle(settlement{Ack: true}) }

// Nack settles the message for redelivery to its group (this or another
// consumer) as soon as possible. Same guarantees as Ack.
func (m *Message) Nack() error { return m.settle(settlement{}) }

// NackAfter settles the message for redelivery after at least delay. Same
// guarantees as Ack.
//
// Where Capabilities.NativeDelay is true (and delay is within MaxDelay) the
// broker holds the message: the delay holds even if the subscription ends
// or the process exits. Otherwise the delay is emulated: the subscription
// keeps the message leased and nacks it once delay has passed; if the
// subscription ends first, the message is released to the group at once
// and may come back before delay.
//
// Either way a message waiting out its delay holds no slot of the
// subscription's in-flight window: the subscription goes on receiving as
// if the message had been settled.
func (m *Message) NackAfter(delay time.Duration) error {
	if delay < 0 {
		delay = 0
	}
	return m.settle(settlement{Delay: delay})
}

// Settled reports whether the message was acked or nacked.
func (m *Message) Settled() bool {
	if m.d == nil {
		return false
	}
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	return m.d.state != stateOpen
}

func (m *Message) settle(s settlement) error {
	if m.d == nil {
		return nil
	}
	return m.d.settle(s)
}
