package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
)

// historyIdle is how long a history read waits for a record of a
// partition that has not reached its end offset before it counts the
// partition read: the offsets left are transaction markers, records of
// aborted or still open transactions (never returned under
// read_committed), or records deleted by retention meanwhile.
const historyIdle = 3 * time.Second

// ReadHistory implements driver.HistoryDriver: the records of topic whose
// timestamp is in w, partition by partition in offset order (partitions
// interleave), read under read_committed by a client of its own that
// joins no group and commits nothing. It starts each partition at the
// first offset whose timestamp is at or after w.Since (ListOffsets by
// time) and reads up to the end offsets listed when it began. A topic
// that does not exist reads as empty.
func (d *subDriver) ReadHistory(ctx context.Context, topic string, w relay.Window, fn func(relay.Stored) error) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	ends, err := d.listOffsets(ctx, topic, d.adm.ListEndOffsets)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("relay/kafka: listing the end offsets of %q: %w", topic, err)
	}
	var starts kadm.ListedOffsets
	if w.Since.IsZero() {
		starts, err = d.listOffsets(ctx, topic, d.adm.ListStartOffsets)
	} else {
		starts, err = d.listOffsets(ctx, topic, func(ctx context.Context, t ...string) (kadm.ListedOffsets, error) {
			return d.adm.ListOffsetsAfterMilli(ctx, w.Since.UnixMilli(), t...)
		})
	}
	if err != nil {
		return fmt.Errorf("relay/kafka: listing the offsets of %q: %w", topic, err)
	}
	from, to := map[int32]int64{}, map[int32]int64{}
	for p, e := range ends[topic] {
		to[p] = e.Offset
		if s, ok := starts.Lookup(topic, p); ok {
			from[p] = s.Offset
		}
	}
	var m relay.Message
	return readPartitions(ctx, d.opts, topic, from, to, func(r *kgo.Record) (bool, error) {
		if !w.Contains(r.Timestamp) {
			return false, nil
		}
		m = relay.Message{}
		decodeInto(&m, r, nil)
		return false, fn(relay.Stored{Msg: &m, Position: relay.PartitionPosition(r.Partition, r.Offset), Time: r.Timestamp})
	})
}

// readPartitions reads topic's partitions p of from, each from from[p] up
// to to[p] (exclusive), under read_committed with a client made of opts
// that joins no group, and calls fn with each record; fn returns true
// when it has read enough of the record's partition. A partition counts
// read at its end, or after historyIdle without a record for any
// partition still to read (see historyIdle).
func readPartitions(ctx context.Context, opts []kgo.Opt, topic string, from, to map[int32]int64, fn func(*kgo.Record) (bool, error)) error {
	want := map[int32]kgo.Offset{}
	for p, start := range from {
		if start < to[p] {
			want[p] = kgo.NewOffset().At(start)
		}
	}
	if len(want) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(500*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("relay/kafka: %w", err)
	}
	defer cl.Close()
	last := time.Now()
	for len(want) > 0 {
		pctx, cancel := context.WithTimeout(ctx, historyIdle)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if fs.IsClientClosed() {
			return relay.ErrClosed
		}
		got := false
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
				ferr = fmt.Errorf("relay/kafka: reading partition %d of %q: %w", p, t, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if _, ok := want[r.Partition]; !ok || r.Offset >= to[r.Partition] {
				continue
			}
			got = true
			done, err := fn(r)
			if err != nil {
				return err
			}
			if done || r.Offset+1 >= to[r.Partition] {
				delete(want, r.Partition)
				cl.PauseFetchPartitions(map[string][]int32{topic: {r.Partition}})
			}
		}
		if got {
			last = time.Now()
		} else if time.Since(last) >= historyIdle {
			return nil // what is left is not readable (see historyIdle)
		}
	}
	return nil
}
