package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
)

// historyBatch is how many messages one fetch of ReadHistory asks for.
const historyBatch = 500

// ReadHistory implements driver.HistoryDriver: the messages of topic kept
// in its stream whose stored time is in w, in stream order, read by an
// ordered consumer (ephemeral, no acks, filtered on topic, starting at
// w.Since), which the server deletes when it ends. The group's durable
// consumer is not touched. Messages published after the call began are
// not read. A stream that does not exist reads as empty.
func (d *subDriver) ReadHistory(ctx context.Context, topic string, w relay.Window, fn func(relay.Stored) error) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	stream := d.streams.cfg.Stream
	if stream == "" {
		stream = StreamName(topic)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{topic}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if !w.Since.IsZero() {
		since := w.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	c, err := d.js.OrderedConsumer(ctx, stream, cfg)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("relay/nats: reading stream %q: %w", stream, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("relay/nats: reading stream %q: %w", stream, err)
	}
	left := info.NumPending // what the stream holds for the filter now
	for left > 0 {
		b, err := c.Fetch(int(min(left, historyBatch)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("relay/nats: reading stream %q: %w", stream, err)
		}
		got := 0
		for m := range b.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("relay/nats: reading stream %q: %w", stream, err)
			}
			left = md.NumPending
			if !w.Contains(md.Timestamp) {
				if !w.Until.IsZero() && !md.Timestamp.Before(w.Until) {
					return nil // stored times grow with the sequence
				}
				continue
			}
			seq := md.Sequence.Stream
			err = fn(relay.Stored{Msg: decode(m.Headers(), m.Data(), stream, seq), Position: relay.OffsetPosition(int64(seq)), Time: md.Timestamp})
			if err != nil {
				return err
			}
		}
		if err := b.Error(); err != nil {
			return fmt.Errorf("relay/nats: reading stream %q: %w", stream, err)
		}
		if got == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("relay/nats: reading stream %q: no message within 5s while %d were pending", stream, left)
		}
	}
	return nil
}
