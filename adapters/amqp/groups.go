package amqp

import (
	"context"
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

// closeProbe closes ch, a channel of CheckGroups, in the background
// (Close waits for it).
func (d *pubDriver) closeProbe(ch *amqp091.Channel) {
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		_ = ch.Close()
	}()
}
