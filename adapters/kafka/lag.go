package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Lag implements driver.LagDriver: the group's consumer lag on topic, the
// sum over the topic's partitions of the end offset (high watermark) minus
// the group's position. The position is the committed offset (raised to
// the oldest retained offset when retention deleted records past it). A
// partition without a commit is positioned where the group would start
// reading it: the oldest retained offset, except that a group with no
// commit at all on the topic and start=latest counts 0 there (Subscribe
// commits the end offsets first).
//
// Commits cover only the contiguous acked prefix of a partition and are
// asynchronous, so an acked record counts until the commit that covers it
// (see Subscribing in the package doc). Offsets also number transaction
// markers, and records of aborted transactions, which are never delivered
// under the default read_committed isolation; with transactional
// producers the lag can exceed the records still to be delivered. A topic
// that does not exist counts 0.
//
// Lag uses the subscriber's admin client: three requests (start and end
// offsets, the group's commits), bounded by ctx.
func (d *subDriver) Lag(ctx context.Context, topic string) (int64, error) {
	if err := validateTopic(topic); err != nil {
		return 0, err
	}
	ends, err := d.listOffsets(ctx, topic, d.adm.ListEndOffsets)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("relay/kafka: listing the end offsets of %q: %w", topic, err)
	}
	starts, err := d.listOffsets(ctx, topic, d.adm.ListStartOffsets)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return 0, nil // deleted between the two requests
	}
	if err != nil {
		return 0, fmt.Errorf("relay/kafka: listing the start offsets of %q: %w", topic, err)
	}
	group := d.cfg.Group
	fetched, err := d.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		fetched, err = nil, nil // no state yet: nothing committed
	}
	committed := map[int32]int64{}
	fetched.Each(func(o kadm.OffsetResponse) {
		switch {
		case o.Topic != topic:
		case o.Err != nil:
			if err == nil {
				err = o.Err
			}
		case o.At >= 0:
			committed[o.Partition] = o.At
		}
	})
	if err != nil {
		return 0, fmt.Errorf("relay/kafka: reading the offsets of group %q: %w", group, err)
	}
	var lag int64
	for p, end := range ends[topic] {
		start, ok := starts.Lookup(topic, p)
		if !ok {
			return 0, fmt.Errorf("relay/kafka: no start offset listed for partition %d of %q", p, topic)
		}
		pos, ok := committed[p]
		switch {
		case ok:
			pos = max(pos, start.Offset)
		case len(committed) == 0 && d.cfg.Start == StartLatest:
			pos = end.Offset
		default:
			pos = start.Offset
		}
		lag += max(0, end.Offset-pos)
	}
	return lag, nil
}

// listOffsets calls list for topic and returns its result with the first
// partition or topic error.
func (d *subDriver) listOffsets(ctx context.Context, topic string, list func(context.Context, ...string) (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
	listed, err := list(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	return listed, err
}
