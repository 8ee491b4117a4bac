package amqp

import (
	"context"
	"errors"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
)

// CheckGroups implements driver.GroupCheckDriver. RabbitMQ routes a
// message to the queues bound to its topic's exchange when it is
// published, and returns it unroutable when there is none (Publish fails
// with ErrUnroutable). AMQP 0-9-1 tells whether the exchange exists (a
// passive declare, on a short-lived channel of its own) but not which
// queues are bound to it: only RabbitMQ's management API lists bindings.
// So a missing exchange, which no queue can be bound to, is a
// *relay.NoGroupError, and an existing one an error wrapping
// relay.ErrNotSupported that says so. A direct reply-to address always
// has its requester's queue: nil.
func (d *pubDriver) CheckGroups(ctx context.Context, topic string) error {
	if isReplyAddress(topic) {
		return nil
	}
	ex := d.names.exchange(topic)
	ch, conn, _, err := d.sup.openChannel(ctx)
	if err != nil {
		return err
	}
	defer d.closeProbe(ch) // a 404 has closed it already
	err = d.sup.rpc(ctx, conn, func() error {
		return ch.ExchangeDeclarePassive(ex, d.cfg.ExchangeKind, true, false, false, false, nil)
	})
	switch {
	case isNotFound(err):
		return &relay.NoGroupError{Backend: "amqp", Topic: topic,
			Detail: fmt.Sprintf("exchange %q does not exist, so no queue is bound to it", ex)}
	case err != nil:
		return fmt.Errorf("relay/amqp: looking for exchange %q: %w", ex, err)
	}
	return fmt.Errorf("%w: exchange %q exists, but AMQP 0-9-1 does not tell whether a queue is bound to it "+
		"(RabbitMQ's management API lists bindings); a message no queue is bound for fails with ErrUnroutable",
		relay.ErrNotSupported, ex)
}

// SendBatchToGroup implements driver.GroupSendDriver: msgs go through the
// default exchange straight to group's queue of topic
// (<queue_prefix>topic.<group>), confirmed and mandatory as SendBatch
// sends them; a queue that does not exist returns them unroutable, which
// is reported as a *relay.NoGroupError naming the group. The
// topic's exchange is declared as for SendBatch, and bindings play no
// part.
func (d *pubDriver) SendBatchToGroup(ctx context.Context, topic, group string, msgs []*relay.Message) error {
	q := names{exchangePrefix: d.cfg.ExchangePrefix, queuePrefix: d.cfg.QueuePrefix, group: group}.queue(topic)
	plan := sendPlan{topic: topic, ex: "", queue: q, channel: d.channel, enc: encode}
	failed := d.sendTo(ctx, plan, msgs)
	for i, f := range failed {
		if errors.Is(f.Err, ErrUnroutable) {
			failed[i].Err = &relay.NoGroupError{Backend: "amqp", Topic: topic, Group: group,
				Detail: fmt.Sprintf("no queue %q", q)}
		}
	}
	return d.result(msgs, failed)
}

// closeProbe closes ch, a channel of CheckGroups, in the background
// (Close waits for it).
func (d *pubDriver) closeProbe(ch *amqp091.Channel) {
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		_ = ch.Close()
	}()
}
