package amqp

import (
	"context"
	"fmt"
)

// Lag implements driver.LagDriver: the number of ready messages in the
// group's queue of topic (<queue_prefix>topic.<group>), from a passive
// queue declare on a short-lived channel, plus the deliveries of topic
// that this subscriber holds unacknowledged (received and not settled, or
// settled and not yet sent to the broker). AMQP 0-9-1 reports only ready
// messages, so deliveries that other processes' consumers of the group
// hold unacknowledged are not counted (they return to the queue, and to
// the count, if their channel closes), nor are copies waiting in delay
// queues after NackAfter: with one consumer per group (one bridge route,
// one process) Lag is 0 only when every message was acknowledged. A
// queue that does not exist counts 0: nothing is routed to a group before
// Subscribe or Provision declares its queue.
//
// Lag waits for the connection and the broker within ctx; a broker that
// does not answer within it is taken as hung and the connection is
// redialled (see bounded).
func (d *subDriver) Lag(ctx context.Context, topic string) (int64, error) {
	if err := d.names.validateSubscribe(topic); err != nil {
		return 0, err
	}
	conn, _, err := d.sup.get(ctx)
	if err != nil {
		return 0, err
	}
	q := d.names.queue(topic)
	ch, err := d.sup.channelOn(ctx, conn)
	if err != nil {
		return 0, err
	}
	defer d.closeChannel(ch) // a 404 has closed it already
	n, err := bounded(ctx, d.sup, conn, func() (int, error) {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return st.Messages, err
	}, nil)
	switch {
	case err == nil:
		return int64(n) + d.held(topic), nil
	case isNotFound(err):
		return 0, nil
	default:
		return 0, fmt.Errorf("relay/amqp: reading the message count of queue %q: %w", q, err)
	}
}
