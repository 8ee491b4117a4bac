package amqp

import amqp091 "github.com/rabbitmq/amqp091-go"

// SetQosGlobal replaces how a channel's (global) prefetch count is set,
// until the returned restore is called: a test stands in for a broker
// that refuses it.
func SetQosGlobal(f func(ch *amqp091.Channel, count int) error) (restore func()) {
	old := qosGlobal
	qosGlobal = f
	return func() { qosGlobal = old }
}
