package kafka

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// receiver is one subscription: one topic of the subscriber's group
// member (see member), with its own in-flight window, partition trackers,
// redelivery queue and commits.
//
// The Receive that polls the member's client registers polled records in
// a per-partition tracker (partState) and queues them in their topic's
// receiver; Receive hands them out up to the free window slots. Acks
// move each partition's commit target over the contiguous acked prefix,
// and the driver commits the targets (driver.Committer: after each
// settlement batch, or every commit_interval, retrying failed commits).
// A Nack puts the record into a
// redelivery queue that Receive serves first; the commit position stays
// below it.
//
// On revocation the acked prefix is committed synchronously and the
// partition's state dropped: later settlements of its records are
// ignored, queued records of it are not handed out, and the records after
// the commit position are delivered again to the new owner.
type receiver struct {
	d              *subDriver
	m              *member               // set under d.gmu before the receiver is used
	stopMover      func(context.Context) // lets go of the topic's mover of delayed messages; set by Subscribe
	topic          string
	log            *slog.Logger
	window         int
	maxUncommitted int
	// pauseWarned is when the last pause was logged at Warn; pauses within
	// pauseWarnEvery of it are logged at Debug (a message that keeps
	// waiting out NackAfter pauses its partition again on every round).
	pauseWarned time.Time
	// arena holds the decoded fields of redelivered messages; used by
	// take, under mu. pollArena holds those of polled records; used by
	// register, under the member's poller. Both are nil with
	// share_payloads=true: messages share the records' bytes (see
	// decodeInto).
	arena, pollArena *driver.Arena

	commitMu sync.Mutex // orders the driver's commits, revocations and Close

	mu    sync.Mutex
	parts map[int32]*partState
	// ahead holds the polled records not handed out yet, bounded by
	// fetch_max_bytes of keys and values and by aheadRecords (see
	// member): its Ready wakes the Receive waiting for r.
	ahead       *driver.ReadAhead[*handle]
	redeliver   []*handle
	fetchErr    error
	closed      bool               // no more records are registered
	topicPaused bool               // ahead stayed full: fetching of the topic paused (see member.full)
	stopPoll    context.CancelFunc // ends this receiver's poll in progress; nil while none
}

// pauseWarnEvery bounds the Warn lines about paused partitions to one per
// interval per subscription; the others go to Debug.
const pauseWarnEvery = time.Minute

// stuckGrace is how long the oldest unacked record of a partition must
// have blocked its commit position before max_uncommitted pauses fetching.
// A variable for tests only.
var stuckGrace = time.Second

// handle is the driver handle of one delivery.
type handle struct {
	ps      *partState
	rec     *kgo.Record
	msg     *relay.Message // decoded when queued; nil for a redelivery, decoded when taken
	attempt int32
	queued  time.Time // when a poll queued it
}

func newReceiver(d *subDriver, topic string) *receiver {
	r := &receiver{
		d:              d,
		topic:          topic,
		log:            d.cfg.Logger.With("backend", "kafka", "topic", topic, "group", d.cfg.Group),
		window:         max(1, d.maxWindow),
		maxUncommitted: d.cfg.MaxUncommitted,
		parts:          make(map[int32]*partState),
		ahead:          driver.NewReadAhead(max(1, d.cfg.FetchMaxBytes), aheadRecords(d.maxWindow), handleBytes),
	}
	r.arena, r.pollArena = decodeArena(d.cfg), decodeArena(d.cfg)
	return r
}

// signal wakes the Receive waiting for r's records, ending its poll.
func (r *receiver) signal() {
	r.ahead.Wake()
	r.mu.Lock()
	stop := r.stopPoll
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// pollingWith records stop as the way to end r's poll in progress (nil:
// none), and reports false, instead of recording it, when r has a
// redelivery or an error to return at once.
func (r *receiver) pollingWith(stop context.CancelFunc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if stop != nil && (len(r.redeliver) > 0 || r.fetchErr != nil) {
		return false
	}
	r.stopPoll = stop
	return true
}

// Receive returns redeliveries first, otherwise up to max queued records;
// when none is queued it polls the member's client, or waits for the
// sibling subscription that polls it (see member.await).
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		r.m.drain()
		r.mu.Lock()
		out := r.take(max)
		resume := false
		if r.topicPaused && r.ahead.HalfEmpty() {
			r.topicPaused, resume = false, true
		}
		room := len(out) > 0 && !r.ahead.Full()
		err := r.fetchErr
		if len(out) == 0 {
			r.fetchErr = nil
		}
		r.mu.Unlock()
		if resume {
			r.m.cl.ResumeFetchTopics(r.topic)
		}
		if room {
			r.m.roomMade()
		}
		if len(out) > 0 {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if !r.m.await(ctx, r) {
			return nil, ctx.Err()
		}
	}
}

// take pops up to max handles of partitions still owned, redeliveries
// first, otherwise records polled ahead, and turns them into deliveries,
// counting each delivery. Call with r.mu held.
func (r *receiver) take(max int) []driver.Received {
	if out := r.takeFrom(max, len(r.redeliver), r.popRedelivery); len(out) > 0 {
		return out
	}
	return r.takeFrom(max, r.ahead.Len(), r.ahead.Pop)
}

func (r *receiver) popRedelivery() (*handle, bool) {
	if len(r.redeliver) == 0 {
		return nil, false
	}
	h := r.redeliver[0]
	if r.redeliver = r.redeliver[1:]; len(r.redeliver) == 0 {
		r.redeliver = nil
	}
	return h, true
}

// takeFrom is take from one source of handles, which holds queued of them.
func (r *receiver) takeFrom(max, queued int, pop func() (*handle, bool)) []driver.Received {
	k := min(max, queued)
	if k == 0 {
		return nil
	}
	out := make([]driver.Received, 0, k)
	var msgs []relay.Message // redeliveries' messages, one allocation for the batch
	for len(out) < max {
		h, ok := pop()
		if !ok {
			break
		}
		if h.ps.revoked {
			continue // partition revoked meanwhile
		}
		e := h.ps.find(h.rec.Offset)
		if e == nil {
			continue // replaced after the log was truncated
		}
		e.attempt++
		h.attempt = e.attempt
		m := h.msg
		if m == nil {
			if msgs == nil {
				msgs = make([]relay.Message, k)
			}
			m = &msgs[len(out)]
			decodeInto(m, h.rec, r.arena)
		}
		h.msg = nil // the consumer's now
		out = append(out, driver.Received{Msg: m, Attempt: int(h.attempt), Handle: h,
			Position: relay.PartitionPosition(h.rec.Partition, h.rec.Offset)})
	}
	return out
}

// fetchError makes the next Receive that finds nothing to deliver return err.
func (r *receiver) fetchError(err error) {
	r.mu.Lock()
	if r.fetchErr == nil {
		r.fetchErr = err
	}
	r.mu.Unlock()
	r.signal()
}

// register records the polled records of the topic in their partitions'
// trackers (while rebalances are still blocked) and queues them. It runs
// on the Receive that polled them.
func (r *receiver) register(ft kgo.FetchTopic) {
	// The records are decoded here, before taking r.mu, so that take
	// only hands them out: one allocation for the
	// messages of the poll and one per partition for the handles.
	total := 0
	ft.EachPartition(func(fp kgo.FetchPartition) { total += len(fp.Records) })
	msgs := make([]relay.Message, total)
	decoded := msgs
	ft.EachPartition(func(fp kgo.FetchPartition) {
		fp.EachRecord(func(rec *kgo.Record) {
			decodeInto(&decoded[0], rec, r.pollArena)
			decoded = decoded[1:]
		})
	})
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	var pause []int32
	n, largest := 0, 0
	now := time.Now()
	ft.EachPartition(func(fp kgo.FetchPartition) {
		hs := make([]handle, len(fp.Records))
		ps := r.parts[fp.Partition]
		if ps == nil && len(fp.Records) > 0 {
			ps = newPartState(fp.Partition)
			r.parts[fp.Partition] = ps
		}
		fp.EachRecord(func(rec *kgo.Record) {
			h, m := &hs[0], &msgs[0]
			hs, msgs = hs[1:], msgs[1:]
			n++
			// Deliveries elsewhere in this process; take counts this one.
			seen := int32(attempts.Take(attemptKey{r.d.scope, r.topic, rec.Partition, rec.Offset}))
			ps.add(rec.Offset, rec.LeaderEpoch, seen)
			if !ps.paused && ps.pending() >= r.maxUncommitted && ps.stuck(r.maxUncommitted, stuckGrace, time.Now()) {
				ps.paused = true
				pause = append(pause, ps.part)
			}
			*h = handle{ps: ps, rec: rec, msg: m, queued: now}
			r.ahead.Push(h)
			largest = max(largest, recordBytes(rec))
		})
	})
	if n > 0 {
		r.ahead.Observe(largest)
	}
	r.mu.Unlock()
	if len(pause) > 0 {
		r.m.cl.PauseFetchPartitions(map[string][]int32{r.topic: pause})
		level := slog.LevelWarn
		if now.Sub(r.pauseWarned) < pauseWarnEvery {
			level = slog.LevelDebug
		} else {
			r.pauseWarned = now
		}
		r.log.Log(context.Background(), level, "relay/kafka: pausing partitions: too many records held behind an unsettled one", "partitions", pause, "max_uncommitted", r.maxUncommitted)
	}
	if n > 0 {
		r.signal()
	}
}

// Settle applies acks to the trackers, moving each partition's commit
// target over the contiguous acked prefix, and queues nacked records for
// redelivery. The driver commits the targets next (see Commit: before it
// frees the window slots, so acked-but-uncommitted records stay within the
// window and a crash redelivers at most that many; it retries a failed
// commit). Settlements of revoked partitions are ignored.
func (r *receiver) Settle(_ context.Context, batch []driver.Settle) error {
	now := time.Now()
	r.mu.Lock()
	nacked := false
	var resume []int32
	for _, s := range batch {
		h := s.Handle.(*handle)
		if h.ps.revoked {
			continue
		}
		if !s.Ack {
			r.redeliver = append(r.redeliver, &handle{ps: h.ps, rec: h.rec})
			nacked = true
			continue
		}
		if h.ps.ack(h.rec.Offset) {
			h.ps.headSince = now
		}
		if h.ps.paused && h.ps.pending() <= r.maxUncommitted/2 {
			h.ps.paused = false
			resume = append(resume, h.ps.part)
		}
	}
	r.mu.Unlock()
	if nacked {
		r.signal()
	}
	if len(resume) > 0 {
		r.m.cl.ResumeFetchPartitions(map[string][]int32{r.topic: resume})
	}
	return nil
}

// Release has nothing to do at the broker: unsettled records are simply
// not committed, and Close gives the topic's partitions up at once so that
// another member gets them without waiting for a session timeout.
func (r *receiver) Release(context.Context, []any) error { return nil }

// Close commits the acked prefix of every partition, then stops consuming
// the topic: the member purges it (a rebalance hands its partitions to
// the group), or leaves the group if this was its last topic. ctx bounds
// all of it.
func (r *receiver) Close(ctx context.Context) error {
	// The mover of delayed messages stops beside the subscription, so
	// that the two bounded waits do not add up.
	moverStopped := make(chan struct{})
	go func(ctx context.Context) {
		defer close(moverStopped)
		if r.stopMover != nil {
			r.stopMover(ctx)
		}
	}(ctx)
	ctx, cancel := context.WithTimeout(ctx, brokerTimeout)
	defer cancel()
	if err := r.commitNow(ctx); err != nil {
		r.log.Warn("relay/kafka: final commit failed; acked records after the last commit will be delivered again", "err", err)
	}
	r.mu.Lock()
	r.closed = true
	var paused []int32
	for _, ps := range r.parts {
		r.forget(ps)
		if ps.paused {
			paused = append(paused, ps.part)
		}
	}
	r.parts = map[int32]*partState{}
	r.redeliver = nil
	r.ahead.Clear()
	r.mu.Unlock()
	if len(paused) > 0 {
		r.m.cl.ResumeFetchPartitions(map[string][]int32{r.topic: paused})
	}
	r.d.release(ctx, r)
	<-moverStopped
	return nil
}

// drop commits what is acked on parts (unless commit is false: the
// partitions were lost) and drops their state. Called from the member's
// revocation callbacks, with polls blocked.
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
	// Records of dropped partitions waiting ahead go to their new owner:
	// take them out, so they do not count against the read-ahead.
	r.ahead.DeleteFunc(func(h *handle) bool { return h.ps.revoked })
	r.mu.Unlock()
	r.m.roomMade()
	if len(resume) > 0 {
		r.m.cl.ResumeFetchPartitions(map[string][]int32{r.topic: resume})
	}
	if !commit || len(offsets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
	defer cancel()
	if err := r.commit(ctx, offsets, states); err != nil {
		r.log.Warn("relay/kafka: commit on revocation failed; acked records after the last commit will be delivered again", "err", err)
	}
}

// attempts holds the delivery counts of records whose partition left a
// receiver (revocation, Close) unacked, so that a later subscription of
// the same group in this process continues the count: Kafka counts no
// deliveries. Another process starts again at 1.
var attempts driver.AttemptMemo[attemptKey]

type attemptKey struct {
	scope     string // attemptScope
	topic     string
	partition int32
	offset    int64
}

// attemptScope names the brokers and the group of cfg in attemptKey.
func attemptScope(cfg *SubscriberConfig) string {
	brokers := slices.Clone(cfg.Brokers)
	slices.Sort(brokers)
	return strings.Join(brokers, ",") + "|" + cfg.Group
}

// forget marks ps revoked, so that its handles are stale from now on (their
// settlements are ignored, queued ones are not handed out), and remembers
// the delivery counts of its unacked records for a later owner in this
// process. Call with r.mu held, before ps leaves r.parts.
func (r *receiver) forget(ps *partState) {
	ps.revoked = true
	ps.unacked(func(e entry) {
		attempts.Remember(attemptKey{r.d.scope, r.topic, ps.part, e.offset}, int(e.attempt))
	})
}

// maxAheadRecords bounds the records polled ahead of a subscription
// whatever their size (a waiting record costs its handle beyond the
// record itself).
const maxAheadRecords = 8192

// aheadRecords is a subscription's bound of records polled ahead: at
// least two windows.
func aheadRecords(window int) int { return max(2*max(1, window), maxAheadRecords) }

// recordBytes is what a record waiting ahead weighs against
// fetch_max_bytes.
func recordBytes(rec *kgo.Record) int { return len(rec.Key) + len(rec.Value) }

func handleBytes(h *handle) int { return recordBytes(h.rec) }
