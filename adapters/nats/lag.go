package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Lag implements driver.LagDriver: the consumer's NumPending (messages of
// the topic not yet delivered to the group) plus NumAckPending (delivered
// and not yet acknowledged, including those waiting out a NackAfter).
// Without a consumer it counts what a new one would receive: the topic's
// messages in its stream; without a stream, 0.
func (d *subDriver) Lag(ctx context.Context, topic string) (int64, error) {
	if err := validateTopic(topic); err != nil {
		return 0, err
	}
	stream := d.streams.cfg.Stream
	if stream == "" {
		stream = StreamName(topic)
	}
	c, err := d.js.Consumer(ctx, stream, d.consumerName(topic))
	switch {
	case err == nil:
		info, err := c.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("relay/nats: reading consumer info: %w", err)
		}
		return int64(info.NumPending) + int64(info.NumAckPending), nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return 0, nil
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return 0, fmt.Errorf("relay/nats: looking up the group's consumer: %w", err)
	}
	s, err := d.js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("relay/nats: looking up stream %q: %w", stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(topic))
	if err != nil {
		return 0, fmt.Errorf("relay/nats: reading stream info of %q: %w", stream, err)
	}
	if n, ok := info.State.Subjects[topic]; ok {
		return int64(n), nil
	}
	return int64(info.State.Msgs), nil
}
