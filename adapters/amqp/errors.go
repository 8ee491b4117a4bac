package amqp

import (
	"errors"
	"fmt"
)

// ErrUnroutable is matched (errors.Is) by the failure of a message that the
// broker returned because no queue is bound for it: the topic has no group
// yet (see Subscriber.Provision) or no binding matches its Key. The broker
// dropped it; nothing was delivered.
var ErrUnroutable = errors.New("amqp: message unroutable: no queue is bound for it")

// ErrNacked is matched by the failure of a message the broker refused with
// a negative publisher confirm (an internal error, or a queue overflow
// policy of reject-publish).
var ErrNacked = errors.New("amqp: broker refused the message (negative confirm)")

// UnroutableError describes one message the broker returned. It matches
// ErrUnroutable.
type UnroutableError struct {
	MessageID  string
	Exchange   string
	RoutingKey string
	ReplyCode  uint16
	ReplyText  string
}

func (e *UnroutableError) Error() string {
	return fmt.Sprintf("amqp: message %s to exchange %q with routing key %q returned by the broker: %d %s (no queue bound: subscribe or Provision a group first, or check the binding keys)",
		e.MessageID, e.Exchange, e.RoutingKey, e.ReplyCode, e.ReplyText)
}

// Is makes errors.Is(err, ErrUnroutable) true.
func (e *UnroutableError) Is(target error) bool { return target == ErrUnroutable }
