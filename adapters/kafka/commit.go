package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Commit implements driver.Committer: it sends every partition's target
// that the broker has not confirmed yet, and waits for the answer.
func (r *receiver) Commit(ctx context.Context) error { return r.commitNow(ctx) }

// commitNow sends every partition's target that the broker has not
// confirmed yet, and waits for the answer.
func (r *receiver) commitNow(ctx context.Context) error {
	r.commitMu.Lock()
	defer r.commitMu.Unlock()
	r.mu.Lock()
	offsets := make(map[int32]kgo.EpochOffset)
	states := make(map[int32]*partState)
	for p, ps := range r.parts {
		if ps.dirty() {
			offsets[p] = ps.target
			states[p] = ps
		}
	}
	r.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	return r.commit(ctx, offsets, states)
}

// commit commits offsets synchronously and records what the broker
// confirmed. Call with r.commitMu held.
func (r *receiver) commit(ctx context.Context, offsets map[int32]kgo.EpochOffset, states map[int32]*partState) error {
	var cerr error
	r.m.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{r.topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
						if cerr == nil {
							cerr = fmt.Errorf("relay/kafka: commit of %s[%d]: %w", r.topic, p.Partition, e)
						}
						continue
					}
					ps, off := states[p.Partition], offsets[p.Partition]
					if ps != nil && ps.committed < off.Offset {
						ps.committed = off.Offset
					}
				}
			}
		})
	return cerr
}
