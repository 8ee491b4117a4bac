package amqp

import (
	"context"
	"fmt"
)

// Lag implements driver.LagDriver: the number of ready messages in the
// group's queue of topic (<queue_prefix>topic.<group>), from a passive
// queue declare on a short-lived channel. AMQP 0-9-1 reports only ready
// messages, so deliveries that consumers hold unacknowledged are not
// counted (they return to the queue, and to the count, if their channel
// closes), nor are copies waiting in delay queues after NackAfter. A queue
// that does not exist counts 0: nothing is routed to a group before
// Subscribe or Provision declares its queue.
//
// Lag waits for the connection within ctx. The declare itself cannot be
// interrupted; when ctx ends first Lag returns at once and the declare
// finishes in the background (the connection's close bounds it).
func (d *subDriver) Lag(ctx context.Context, topic string) (int64, error) {
	if err := d.names.validateSubscribe(topic); err != nil {
		return 0, err
	}
	conn, _, err := d.sup.get(ctx)
	if err != nil {
		return 0, err
	}
	q := d.names.queue(topic)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return 0, errConnClosed
	}
	d.bg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.bg.Done()
		ch, err := conn.Channel()
		if err != nil {
			done <- result{err: fmt.Errorf("amqp: opening a channel: %w", err)}
			return
		}
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		_ = ch.Close() // a 404 has closed it already
		done <- result{n: st.Messages, err: err}
	}()
	select {
	case r := <-done:
		switch {
		case r.err == nil:
			return int64(r.n), nil
		case isNotFound(r.err):
			return 0, nil
		default:
			return 0, fmt.Errorf("amqp: reading the message count of queue %q: %w", q, r.err)
		}
	case <-ctx.Done():
		return 0, fmt.Errorf("amqp: reading the message count of queue %q: %w", q, ctx.Err())
	}
}
