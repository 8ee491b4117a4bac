package amqp

import (
	"errors"
	"fmt"
)

// ErrUnroutable is matched (errors.Is) by the failure of a message that the
// broker returned because no queue is bound for it: the topic has no group
// yet (see Subscriber.Provision) or no binding matches its Key. The broker
// dropped it; nothing was delivered.
var ErrUnroutable = errors.New("relay/amqp: message unroutable: no queue is bound for it")

// ErrNacked is matched by the failure of a message the broker refused with
// a negative publisher confirm (an internal error, or a queue overflow
// policy of reject-publish).
var ErrNacked = errors.New("relay/amqp: broker refused the message (negative confirm)")

// UnroutableError describes one message the broker returned. It matches
// ErrUnroutable. Its text does not repeat the message ID: it is reported
// inside a *relay.PublishError, which names the message.
type UnroutableError struct {
	MessageID  string
	Topic      string
	Exchange   string
	RoutingKey string
	ReplyCode  uint16
	ReplyText  string
}

func (e *UnroutableError) Error() string {
	return fmt.Sprintf("relay/amqp: message unroutable: no queue is bound to exchange %q for routing key %q (broker reply %d %s); provision a group first with `relay provision URL %s --group GROUP` (or Subscriber.Provision), or check the binding keys",
		e.Exchange, e.RoutingKey, e.ReplyCode, e.ReplyText, e.Topic)
}

// Is makes errors.Is(err, ErrUnroutable) true.
func (e *UnroutableError) Is(target error) bool { return target == ErrUnroutable }
