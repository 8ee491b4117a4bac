package kafka

// The mover of delayed messages: it consumes a topic's delay buckets and
// produces each record to its target topic once due (see delayed.go).

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-relay/relay/driver"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// moverGroup is the consumer group of the movers of topic.
func moverGroup(topic string) string { return "relay-delay-mover." + topic }

// newMovers returns the movers of delayed messages of d: one per target
// topic, however many of d's subscriptions consume it (see
// subDriver.startMover).
func newMovers(d *subDriver) *driver.Mover {
	return driver.NewMover(func(topic string) (driver.MoveTask, error) { return newMover(d, topic) },
		d.cfg.Logger.With("backend", "kafka"))
}

// mover moves the delayed records of one target topic (see the top of
// this file) as a driver.MoveTask. The Mover's loop owns the routing;
// produce promises and the group's revocations meet it under mu.
type mover struct {
	target string
	cl     *kgo.Client
	log    *slog.Logger
	// kill cancels the client's context, aborting its requests: close
	// keeps its deadline against a broker that stopped answering.
	kill context.CancelFunc

	mu    sync.Mutex
	parts map[tp]*moverPart
	held  heldHeap
	seq   uint64 // orders held records of one time
	// out are the records routed under mu, produced by Move after it lets
	// go of mu (Produce may block while the client's buffer is full, and
	// the promises that free it take mu).
	out []outRecord
}

type outRecord struct {
	rec *kgo.Record
	it  *heldItem
}

type tp struct {
	topic string
	part  int32
}

// moverPart is the state of one assigned bucket partition: the records
// polled and not routed yet, and a partState of those routed (acked once
// their produce succeeded, or at once when skipped), whose settled prefix
// is what the mover commits. A new assignment makes a new moverPart, so
// promises for an earlier one (compared by pointer) are ignored.
type moverPart struct {
	*partState
	queue []*kgo.Record // polled, not routed yet
	next  int64         // offset after the last record polled
}

// heldItem is a record waiting in memory for its due time (or for a
// retry after a failed produce).
type heldItem struct {
	rec  *kgo.Record
	at   time.Time // when to route it again
	seq  uint64    // ties in order of arrival
	tp   tp
	part *moverPart // the assignment it was polled under
}

type heldHeap []*heldItem

func (h heldHeap) Len() int { return len(h) }
func (h heldHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h heldHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)   { *h = append(*h, x.(*heldItem)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newMover(d *subDriver, target string) (*mover, error) {
	mv := &mover{
		target: target,
		log:    d.cfg.Logger.With("backend", "kafka", "topic", target, "group", moverGroup(target)),
		parts:  map[tp]*moverPart{},
	}
	opts := d.groupOpts(moverGroup(target), DelayTopics(target), mv.onRevoked, mv.onLost)
	clCtx, kill := context.WithCancel(context.Background())
	cl, err := kgo.NewClient(append(opts, kgo.WithContext(clCtx))...)
	if err != nil {
		kill()
		return nil, fmt.Errorf("relay/kafka: delay mover of %q: %w", target, err)
	}
	mv.cl, mv.kill = cl, kill
	return mv, nil
}

// Close implements driver.MoveTask: once the loop stopped, it commits what
// was moved and leaves the group (the records it held in memory are moved
// by the next member, which may repeat moves not committed yet). It
// returns by ctx's end (or brokerTimeout), aborting requests then.
func (mv *mover) Close(ctx context.Context) {
	defer mv.kill()
	defer context.AfterFunc(ctx, mv.kill)()
	ctx, cancel := context.WithTimeout(ctx, brokerTimeout)
	defer cancel()
	mv.mu.Lock()
	offsets := mv.commitsLocked(nil)
	mv.mu.Unlock()
	mv.commit(ctx, offsets)
	if err := mv.cl.LeaveGroupContext(ctx); err != nil && !isCtxErr(err) {
		mv.log.Warn("relay/kafka: delay mover leaving its group", "err", err)
	}
	mv.cl.Close()
}

// Move implements driver.MoveTask: it routes what is due (see
// routeLocked), produces it, commits what was moved, and polls the bucket
// topics until the next record is due (at most half a second, so that a
// record polled meanwhile is routed in time). The records it produces
// carry ctx: a record still buffered when the loop stops fails and is
// moved again by the next owner of its bucket partition.
func (mv *mover) Move(ctx context.Context) (time.Duration, error) {
	mv.mu.Lock()
	wake := mv.routeLocked(time.Now())
	offsets := mv.commitsLocked(nil)
	out := mv.out
	mv.out = nil
	mv.mu.Unlock()
	for _, o := range out {
		it := o.it
		mv.cl.Produce(ctx, o.rec, func(_ *kgo.Record, err error) { mv.produced(it, err) })
	}
	mv.commit(ctx, offsets)
	if ctx.Err() != nil {
		return 0, nil
	}
	wait := min(time.Until(wake), 500*time.Millisecond)
	pctx, cancel := context.WithTimeout(ctx, max(wait, time.Millisecond))
	fetches := mv.cl.PollRecords(pctx, 1000)
	cancel()
	defer mv.cl.AllowRebalance()
	if ctx.Err() != nil {
		return 0, nil
	}
	mv.mu.Lock()
	defer mv.mu.Unlock()
	fetches.EachError(func(t string, p int32, err error) {
		if !isCtxErr(err) {
			mv.log.Warn("relay/kafka: delay mover fetch", "topic", t, "partition", p, "err", err)
		}
	})
	fetches.EachRecord(func(r *kgo.Record) {
		ps := mv.partLocked(tp{r.Topic, r.Partition})
		ps.queue = append(ps.queue, r)
		ps.next = r.Offset + 1
	})
	return 0, nil
}

func (mv *mover) partLocked(k tp) *moverPart {
	ps := mv.parts[k]
	if ps == nil {
		ps = &moverPart{partState: newPartState(k.part), next: -1}
		mv.parts[k] = ps
	}
	return ps
}

// routeLocked routes every record that has waited its bucket and every
// held record that is due, pauses partitions whose head has not waited
// its bucket yet and resumes those whose queue is empty. It returns when
// to look again.
func (mv *mover) routeLocked(now time.Time) (wake time.Time) {
	wake = now.Add(time.Hour)
	pause, resume := map[string][]int32{}, map[string][]int32{}
	for k, ps := range mv.parts {
		bucket, ok := bucketOf(mv.target, k.topic)
		for len(ps.queue) > 0 {
			r := ps.queue[0]
			if ok {
				if ready := r.Timestamp.Add(bucket); now.Before(ready) {
					wake = minTime(wake, ready)
					break
				}
			}
			due, target, good := delayHeaders(r)
			if !good || target != mv.target {
				// Not a record of ours: skip it, so it does not block the partition.
				mv.log.Warn("relay/kafka: delay mover skips a record without valid delay headers", "topic", k.topic, "partition", k.part, "offset", r.Offset)
				ps.add(r.Offset, r.LeaderEpoch, 1)
				ps.ack(r.Offset)
				ps.queue = ps.queue[1:]
				continue
			}
			left := due.Sub(now)
			if left > 0 && left < delayBuckets[1] && len(mv.held) >= maxHeld {
				wake = minTime(wake, now.Add(10*time.Millisecond))
				break
			}
			ps.add(r.Offset, r.LeaderEpoch, 1)
			ps.queue = ps.queue[1:]
			mv.dispatchLocked(&heldItem{rec: r, at: due, tp: k, part: ps}, now)
		}
		switch {
		case len(ps.queue) > 0 && !ps.paused:
			ps.paused = true
			pause[k.topic] = append(pause[k.topic], k.part)
		case len(ps.queue) == 0 && ps.paused:
			ps.paused = false
			resume[k.topic] = append(resume[k.topic], k.part)
		}
	}
	for len(mv.held) > 0 && !mv.held[0].at.After(now) {
		it := heap.Pop(&mv.held).(*heldItem)
		mv.dispatchLocked(it, now)
	}
	if len(mv.held) > 0 {
		wake = minTime(wake, mv.held[0].at)
	}
	if len(pause) > 0 {
		mv.cl.PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		mv.cl.ResumeFetchPartitions(resume)
	}
	return wake
}

// dispatchLocked sends it on by the time left until its due time: to the
// target when due, to a bucket when a second or more is left (both queued
// in out, for run to produce), else into memory until due.
func (mv *mover) dispatchLocked(it *heldItem, now time.Time) {
	due, _, _ := delayHeaders(it.rec)
	left := due.Sub(now)
	var out *kgo.Record
	switch {
	case left <= 0:
		out = undelayed(it.rec, mv.target)
	case left >= delayBuckets[1]:
		out = rebucketed(it.rec, mv.target, left)
	default:
		it.at = due
		mv.seq++
		it.seq = mv.seq
		heap.Push(&mv.held, it)
		return
	}
	mv.out = append(mv.out, outRecord{out, it})
}

// produced settles it once its record is acknowledged, or holds it for a
// retry in a second (unless the client or the loop stopped).
func (mv *mover) produced(it *heldItem, err error) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	if mv.parts[it.tp] != it.part {
		return // revoked meanwhile: the next owner moves it again
	}
	if err != nil {
		if err != kgo.ErrClientClosed && !isCtxErr(err) {
			mv.log.Warn("relay/kafka: delay mover produce failed; retrying in 1s", "topic", it.rec.Topic, "err", err)
			mv.seq++
			it.at, it.seq = time.Now().Add(time.Second), mv.seq
			heap.Push(&mv.held, it)
		}
		return
	}
	it.part.ack(it.rec.Offset)
}

// commitsLocked advances each partition (of only, when not nil) past its
// settled prefix and returns the offsets to commit.
func (mv *mover) commitsLocked(only map[string][]int32) map[string]map[int32]kgo.EpochOffset {
	var out map[string]map[int32]kgo.EpochOffset
	for k, ps := range mv.parts {
		if only != nil && !containsPart(only[k.topic], k.part) {
			continue
		}
		at := ps.next
		switch {
		case ps.pending() > 0:
			at = ps.entries[ps.head].offset // the oldest unsettled
		case len(ps.queue) > 0:
			at = ps.queue[0].Offset
		}
		if at < 0 || at <= ps.committed {
			continue
		}
		ps.committed = at
		if out == nil {
			out = map[string]map[int32]kgo.EpochOffset{}
		}
		if out[k.topic] == nil {
			out[k.topic] = map[int32]kgo.EpochOffset{}
		}
		out[k.topic][k.part] = kgo.EpochOffset{Epoch: -1, Offset: at}
	}
	return out
}

func containsPart(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

func (mv *mover) commit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) {
	if len(offsets) == 0 {
		return
	}
	mv.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err != nil && !isCtxErr(err) {
			mv.log.Warn("relay/kafka: delay mover commit failed; moves after the last commit may be repeated", "err", err)
		}
	})
}

// onRevoked commits what was moved of the revoked partitions and drops
// their state: records still held are moved again by the next owner.
func (mv *mover) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	mv.mu.Lock()
	offsets := mv.commitsLocked(revoked)
	mv.mu.Unlock()
	mv.commit(ctx, offsets)
	mv.onLost(ctx, nil, revoked)
}

// onLost drops the state of the lost partitions without committing.
func (mv *mover) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	mv.mu.Lock()
	var resume map[string][]int32
	for t, parts := range lost {
		for _, p := range parts {
			k := tp{t, p}
			ps := mv.parts[k]
			if ps == nil {
				continue
			}
			if ps.paused {
				if resume == nil {
					resume = map[string][]int32{}
				}
				resume[t] = append(resume[t], p)
			}
			delete(mv.parts, k)
		}
	}
	kept := mv.held[:0]
	for _, it := range mv.held {
		if _, ok := mv.parts[it.tp]; ok {
			kept = append(kept, it)
		}
	}
	mv.held = kept
	heap.Init(&mv.held)
	mv.mu.Unlock()
	if resume != nil {
		mv.cl.ResumeFetchPartitions(resume)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
