package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/backoff"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// receiver is one subscription: one group member (its own kgo client)
// consuming one topic.
//
// Records are polled up to the free in-flight slots, registered in a
// per-partition tracker (partState) and handed out; acks move each
// partition's commit target over the contiguous acked prefix, and a commit
// loop sends the targets with one commit request in flight at a time. A
// Nack puts the record into a redelivery queue that Receive serves before
// polling again; the commit position stays below it.
//
// Rebalances: BlockRebalanceOnPoll holds revocation between a poll and the
// registration of its records, so a revoked partition's state is never
// recreated from a stale poll. On revocation the acked prefix is committed
// synchronously and the partition's state dropped: later settlements of
// its records are ignored, and the records after the commit position are
// delivered again to the new owner.
type receiver struct {
	d              *subDriver
	topic          string
	cl             *kgo.Client
	log            *slog.Logger
	maxUncommitted int
	commitInterval time.Duration

	commitMu sync.Mutex // orders commits of the loop, revocations and Close

	mu        sync.Mutex
	parts     map[int32]*partState
	redeliver []*handle
	wake      context.CancelFunc // interrupts a blocked poll when a Nack arrives

	commitReq chan struct{}
	stop      chan struct{}
	loopDone  chan struct{}
	// kill is the client's context: Close cancels it when its own ctx ends,
	// so that calls to a broker that stopped answering fail at once.
	kill context.CancelFunc
}

// stuckGrace is how long the oldest unacked record of a partition must
// have blocked its commit position before max_uncommitted pauses fetching.
// A variable for tests only.
var stuckGrace = time.Second

// handle is the driver handle of one delivery.
type handle struct {
	ps      *partState
	rec     *kgo.Record
	attempt int32
}

func newReceiver(d *subDriver, topic string) (*receiver, error) {
	r := &receiver{
		d:              d,
		topic:          topic,
		log:            d.cfg.Logger.With("backend", "kafka", "topic", topic, "group", d.cfg.Group),
		maxUncommitted: d.cfg.MaxUncommitted,
		commitInterval: d.cfg.CommitInterval,
		parts:          make(map[int32]*partState),
		commitReq:      make(chan struct{}, 1),
		stop:           make(chan struct{}),
		loopDone:       make(chan struct{}),
	}
	isolation := kgo.ReadCommitted()
	if d.cfg.ReadUncommitted {
		isolation = kgo.ReadUncommitted()
	}
	opts := append(append([]kgo.Opt(nil), d.opts...),
		kgo.ConsumerGroup(d.cfg.Group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(r.onRevoked),
		kgo.OnPartitionsLost(r.onLost),
		// Partitions without a committed offset start at the oldest
		// record; start=latest is applied by committing end offsets for
		// a new group first (ensureGroupStart).
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(d.cfg.SessionTimeout),
		kgo.HeartbeatInterval(d.cfg.HeartbeatInterval),
		kgo.RebalanceTimeout(d.cfg.RebalanceTimeout),
		kgo.FetchMaxWait(d.cfg.FetchMaxWait),
		// Bound what the client buffers ahead of the in-flight window: one
		// fetch at a time, of at most FetchMaxBytes.
		kgo.FetchMaxBytes(int32(d.cfg.FetchMaxBytes)),
		kgo.FetchMaxPartitionBytes(int32(max(1, d.cfg.FetchMaxBytes/4))),
		kgo.MaxConcurrentFetches(1),
		kgo.Balancers(d.cfg.balancer()),
		kgo.FetchIsolationLevel(isolation),
	)
	clCtx, kill := context.WithCancel(context.Background())
	cl, err := kgo.NewClient(append(opts, kgo.WithContext(clCtx))...)
	if err != nil {
		kill()
		return nil, fmt.Errorf("kafka: %w", err)
	}
	r.cl, r.kill = cl, kill
	go r.commitLoop()
	return r, nil
}

// Receive returns redeliveries first, otherwise polls up to max records.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		r.mu.Lock()
		if out := r.takeRedeliveries(max); len(out) > 0 {
			r.mu.Unlock()
			return out, nil
		}
		pctx, cancel := context.WithCancel(ctx)
		r.wake = cancel
		r.mu.Unlock()

		fs := r.cl.PollRecords(pctx, max)
		out, err := r.register(fs)
		r.cl.AllowRebalance()
		cancel()
		if len(out) > 0 {
			if err != nil {
				r.log.Warn("kafka: fetch error", "err", err)
			}
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, err
		}
		// Woken by a Nack, or an empty poll: look again.
	}
}

// takeRedeliveries pops up to max queued redeliveries of partitions still
// owned. Call with r.mu held.
func (r *receiver) takeRedeliveries(max int) []driver.Received {
	var out []driver.Received
	n := 0
	for n < len(r.redeliver) && len(out) < max {
		h := r.redeliver[n]
		n++
		if r.parts[h.ps.part] != h.ps {
			continue // partition revoked meanwhile
		}
		if e := h.ps.find(h.rec.Offset); e != nil {
			e.attempt = h.attempt
		}
		out = append(out, driver.Received{Msg: decodeRecord(h.rec), Attempt: int(h.attempt), Handle: h})
	}
	r.redeliver = r.redeliver[n:]
	if len(r.redeliver) == 0 {
		r.redeliver = nil
	}
	return out
}

// register records the polled records in their partitions' trackers
// (while rebalances are still blocked) and turns them into deliveries.
func (r *receiver) register(fs kgo.Fetches) ([]driver.Received, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wake = nil

	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if ferr != nil || isCtxErr(err) {
			return
		}
		if errors.Is(err, kgo.ErrClientClosed) {
			ferr = fmt.Errorf("kafka: %w: %w", relay.ErrClosed, err)
			return
		}
		ferr = fmt.Errorf("kafka: fetching %s[%d]: %w", t, p, err)
	})
	n := fs.NumRecords()
	if n == 0 {
		return nil, ferr
	}
	out := make([]driver.Received, 0, n)
	var pause []int32
	fs.EachRecord(func(rec *kgo.Record) {
		ps := r.parts[rec.Partition]
		if ps == nil {
			ps = newPartState(rec.Partition)
			r.parts[rec.Partition] = ps
		}
		attempt := 1 + recallAttempts(attemptKey{r.d.scope, r.topic, rec.Partition, rec.Offset})
		ps.add(rec.Offset, rec.LeaderEpoch, attempt)
		if !ps.paused && ps.pending() >= r.maxUncommitted && ps.stuck(r.maxUncommitted, stuckGrace, time.Now()) {
			ps.paused = true
			pause = append(pause, ps.part)
		}
		out = append(out, driver.Received{
			Msg:     decodeRecord(rec),
			Attempt: int(attempt),
			Handle:  &handle{ps: ps, rec: rec, attempt: attempt},
		})
	})
	if len(pause) > 0 {
		r.cl.PauseFetchPartitions(map[string][]int32{r.topic: pause})
		r.log.Warn("kafka: pausing partitions: too many records held behind an unsettled one", "partitions", pause, "max_uncommitted", r.maxUncommitted)
	}
	return out, ferr
}

// Settle applies acks to the trackers and queues nacked records for
// redelivery. When the acked prefix moved it commits it before returning
// (unless commit_interval asks for delayed commits, which the commit loop
// sends); a failed commit is left to the commit loop's retries.
// Settlements of revoked partitions are ignored.
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	now := time.Now()
	r.mu.Lock()
	moved, nacked := false, false
	var resume []int32
	for _, s := range batch {
		h := s.Handle.(*handle)
		if r.parts[h.ps.part] != h.ps {
			continue
		}
		if !s.Ack {
			r.redeliver = append(r.redeliver, &handle{ps: h.ps, rec: h.rec, attempt: h.attempt + 1})
			nacked = true
			continue
		}
		if h.ps.ack(h.rec.Offset) {
			moved = true
			h.ps.headSince = now
		}
		if h.ps.paused && h.ps.pending() <= r.maxUncommitted/2 {
			h.ps.paused = false
			resume = append(resume, h.ps.part)
		}
	}
	if nacked && r.wake != nil {
		r.wake()
	}
	r.mu.Unlock()
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(map[string][]int32{r.topic: resume})
	}
	if moved && r.commitInterval == 0 {
		// Commit before returning: the shared layer frees window slots only
		// after Settle, so acked-but-uncommitted records stay within the
		// in-flight window and a crash redelivers at most that many. A
		// failed commit is retried by the commit loop.
		if err := r.commitNow(ctx); err == nil {
			return nil
		}
	}
	if moved {
		select {
		case r.commitReq <- struct{}{}:
		default:
		}
	}
	return nil
}

// Release has nothing to do at the broker: unsettled records are simply
// not committed, and Close leaves the group at once so that their
// partitions move to another member without waiting for a session timeout.
func (r *receiver) Release(context.Context, []any) error { return nil }

// Close commits the acked prefix of every partition, then leaves the group.
func (r *receiver) Close(ctx context.Context) error {
	defer r.kill()
	defer context.AfterFunc(ctx, r.kill)()
	close(r.stop)
	<-r.loopDone
	ctx, cancel := context.WithTimeout(ctx, brokerTimeout)
	defer cancel()
	err := r.commitNow(ctx)
	if err != nil {
		r.log.Warn("kafka: final commit failed; acked records after the last commit will be delivered again", "err", err)
	}
	if lerr := r.cl.LeaveGroupContext(ctx); lerr != nil && !isCtxErr(lerr) {
		r.log.Warn("kafka: leaving the group", "err", lerr)
	}
	r.cl.Close()
	r.mu.Lock()
	for _, ps := range r.parts {
		r.forget(ps)
	}
	r.parts = map[int32]*partState{}
	r.redeliver = nil
	r.mu.Unlock()
	return nil
}

func (r *receiver) commitLoop() {
	defer close(r.loopDone)
	var bo backoff.Backoff
	var retry <-chan time.Time
	for {
		select {
		case <-r.stop:
			return
		case <-r.commitReq:
		case <-retry:
		}
		retry = nil
		if r.commitInterval > 0 {
			select {
			case <-r.stop:
				return
			case <-time.After(r.commitInterval):
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
		err := r.commitNow(ctx)
		cancel()
		if err != nil {
			r.log.Debug("kafka: commit failed; retrying", "err", err)
			retry = time.After(bo.Next())
			continue
		}
		bo.Reset()
	}
}

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
	r.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{r.topic: offsets},
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
							cerr = fmt.Errorf("kafka: commit of %s[%d]: %w", r.topic, p.Partition, e)
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

// onRevoked commits what is acked on the partitions leaving this member
// and drops their state. It runs on the client's group goroutine, with
// polls blocked.
func (r *receiver) onRevoked(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.drop(lost[r.topic], true)
}

// onLost drops the state of partitions this member no longer owns; a
// commit would be refused, so none is tried.
func (r *receiver) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.drop(lost[r.topic], false)
}

func (r *receiver) drop(parts []int32, commit bool) {
	if len(parts) == 0 {
		return
	}
	r.commitMu.Lock()
	defer r.commitMu.Unlock()
	r.mu.Lock()
	offsets := make(map[int32]kgo.EpochOffset)
	states := make(map[int32]*partState)
	var resume []int32
	for _, p := range parts {
		ps := r.parts[p]
		if ps == nil {
			continue
		}
		if ps.dirty() {
			offsets[p] = ps.target
			states[p] = ps
		}
		if ps.paused {
			resume = append(resume, p)
		}
		r.forget(ps)
		delete(r.parts, p)
	}
	r.mu.Unlock()
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(map[string][]int32{r.topic: resume})
	}
	if !commit || len(offsets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
	defer cancel()
	if err := r.commit(ctx, offsets, states); err != nil {
		r.log.Warn("kafka: commit on revocation failed; acked records after the last commit will be delivered again", "err", err)
	}
}

// forget remembers the delivery counts of ps's unacked records for a later
// owner in this process. Call with r.mu held.
func (r *receiver) forget(ps *partState) {
	ps.unacked(func(e entry) {
		rememberAttempts(attemptKey{r.d.scope, r.topic, ps.part, e.offset}, e.attempt)
	})
}
