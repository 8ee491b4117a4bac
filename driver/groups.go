package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/go-relay/relay"
)

// CheckGroups implements relay.GroupChecker: ErrClosed after Close, the
// topic checks of Publish, then the driver's answer; an error wrapping
// relay.ErrNotSupported when the driver does not implement
// GroupCheckDriver. Close waits for it as for Publish.
func (p *Publisher) CheckGroups(ctx context.Context, topic string) error {
	return p.call(ctx, func(ctx context.Context) error {
		if err := p.validate(topic, nil); err != nil {
			return err
		}
		gc, ok := p.d.(GroupCheckDriver)
		if !ok {
			return fmt.Errorf("%w: the %s adapter cannot tell whether topic %q has a group", relay.ErrNotSupported, p.caps.Backend, topic)
		}
		return gc.CheckGroups(ctx, topic)
	})
}

// PublishToGroup implements relay.GroupPublisher: Publish's checks, then
// the driver's SendBatchToGroup in batches of its MaxBatch, with Publish's
// retries; an error wrapping relay.ErrNotSupported when the driver does
// not implement GroupSendDriver, or when a message is due later
// (Message.DeliverAt). Close waits for it as for Publish.
func (p *Publisher) PublishToGroup(ctx context.Context, topic, group string, msgs ...*relay.Message) error {
	gs, ok := p.d.(GroupSendDriver)
	if !ok {
		return fmt.Errorf("%w: the %s adapter cannot deliver to one group of a topic", relay.ErrNotSupported, p.caps.Backend)
	}
	if group == "" {
		return fmt.Errorf("relay: PublishToGroup: the group is empty")
	}
	return p.call(ctx, func(ctx context.Context) error {
		if err := p.validate(topic, msgs); err != nil {
			return err
		}
		now := time.Now()
		for _, m := range msgs {
			if _, later := Delay(m, now); later {
				return fmt.Errorf("%w: PublishToGroup of message %s, due later (Message.DeliverAt)", relay.ErrNotSupported, m.ID)
			}
		}
		if len(msgs) == 0 {
			return nil
		}
		return p.sendBatches(ctx, topic, msgs, func(ctx context.Context, topic string, batch []*relay.Message) error {
			return gs.SendBatchToGroup(ctx, topic, group, batch)
		})
	})
}
