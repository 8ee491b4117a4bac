package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/go-relay/relay"
)

// member is one member of the subscriber's consumer group: one kgo client
// shared by the subscriptions of several topics (at most one subscription
// per topic). Topics are added with AddConsumeTopics as they are
// subscribed and purged when their subscription ends, so subscribing to
// another topic never makes a sibling subscription fail: it only
// rebalances the member's assignment, and the revocation of each topic's
// partitions is handled by that topic's receiver.
//
// The member has no goroutine of its own: the subscriptions' Receive
// calls poll the client, one at a time (see await), and route the records
// to each topic's receiver, whose read-ahead (driver.ReadAhead) holds them
// until its subscription asks. A Receive also drains what the client has
// buffered into the read-aheads (see drain), since the client fetches
// again only once its buffer is taken. The client is polled only while no
// topic's read-ahead is full (a fetch's worth of bytes, fetch_max_bytes,
// or aheadRecords), so a fast consumer's topic is never paused (kgo drops
// a paused topic's buffered records and fetches them again on resume,
// after the fetch in flight, which costs up to fetch_max_wait). A topic
// whose full read-ahead has waited longer than
// queueGrace for its subscription (a slow or stuck consumer) is paused
// (PauseFetchTopics) until its subscription has taken half of it, so that
// it does not hold back the other topics. The client blocks
// rebalances between a poll and the registration of its records
// (BlockRebalanceOnPoll), so a revoked partition's state is never
// recreated from a stale poll.
type member struct {
	d   *subDriver
	cl  *kgo.Client
	log *slog.Logger
	// assigned is what the member holds (see subDriver.Assignment).
	assigned assigned

	mu    sync.Mutex
	recvs map[string]*receiver // by topic

	room chan struct{} // signalled when a queue drops below its window
	// poller is held (a value sent) by the one Receive that polls the
	// client; the others wait for the records it queues for them.
	poller chan struct{}
	// kill cancels the client's context, which aborts every request it
	// has in flight; close uses it to keep its deadline against a broker
	// that stopped answering.
	kill context.CancelFunc
}

// queueGrace is how long a topic's full queue may wait for its
// subscription before the topic is paused so that the member's other
// topics are polled again. A variable for tests only.
var queueGrace = time.Second

// groupOpts are the client options of a group consumer of this
// subscriber (a member, and the mover of delayed messages): offsets
// committed by relay, rebalances blocked while a poll is handled, and what
// the client buffers bounded ahead of the in-flight windows (one fetch at
// a time, of at most FetchMaxBytes).
func (d *subDriver) groupOpts(group string, topics []string, revoked, lost func(context.Context, *kgo.Client, map[string][]int32)) []kgo.Opt {
	return append(append([]kgo.Opt(nil), d.opts...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(revoked),
		kgo.OnPartitionsLost(lost),
		// Partitions without a committed offset start at the oldest
		// record; start=latest is applied by committing end offsets for
		// a topic new to the group first (ensureGroupStart).
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(d.cfg.SessionTimeout),
		kgo.HeartbeatInterval(d.cfg.HeartbeatInterval),
		kgo.RebalanceTimeout(d.cfg.RebalanceTimeout),
		kgo.FetchMaxWait(d.cfg.FetchMaxWait),
		kgo.FetchMaxBytes(int32(d.cfg.FetchMaxBytes)),
		kgo.FetchMaxPartitionBytes(int32(max(1, d.cfg.FetchMaxBytes/4))),
		kgo.MaxConcurrentFetches(1),
		kgo.Balancers(d.cfg.balancer()),
	)
}

func newMember(d *subDriver, first *receiver) (*member, error) {
	m := &member{d: d, log: d.cfg.Logger.With("backend", "kafka", "group", d.cfg.Group), recvs: map[string]*receiver{first.topic: first},
		room: make(chan struct{}, 1), poller: make(chan struct{}, 1)}
	first.m = m
	isolation := kgo.ReadCommitted()
	if d.cfg.ReadUncommitted {
		isolation = kgo.ReadUncommitted()
	}
	opts := append(d.groupOpts(d.cfg.Group, []string{first.topic}, nil, nil),
		kgo.FetchIsolationLevel(isolation))
	// Applied after groupOpts' callbacks, so these replace them.
	opts = append(opts, m.assigned.opts(m.onRevoked, m.onLost)...)
	clCtx, kill := context.WithCancel(context.Background())
	cl, err := kgo.NewClient(append(opts, kgo.WithContext(clCtx))...)
	if err != nil {
		kill()
		return nil, fmt.Errorf("relay/kafka: %w", err)
	}
	m.cl, m.kill = cl, kill
	return m, nil
}

// joined reports whether the client has a member ID in the group, so
// that it can commit for the group while the group has members.
func (m *member) joined() bool {
	id, _ := m.cl.GroupMetadata()
	return id != ""
}

// add starts consuming r's topic. Call with d.gmu held.
func (m *member) add(r *receiver) {
	r.m = m
	m.mu.Lock()
	m.recvs[r.topic] = r
	m.mu.Unlock()
	m.cl.AddConsumeTopics(r.topic)
}

// remove stops consuming r's topic and reports whether r was the last
// one (the member must then be closed). Call with d.gmu held, so that a
// Subscribe of the same topic cannot add it back before the purge.
func (m *member) remove(r *receiver) (last bool) {
	m.mu.Lock()
	if m.recvs[r.topic] == r {
		delete(m.recvs, r.topic)
	}
	last = len(m.recvs) == 0
	m.mu.Unlock()
	m.roomMade() // r's queue no longer holds polls back
	if last {
		return true
	}
	// Purging revokes the topic's partitions in a rebalance, so another
	// member takes them (with the records after the last commit) at once.
	// Pauses persist across a purge: lift them for a later Subscribe.
	m.cl.PurgeTopicsFromConsuming(r.topic)
	m.cl.ResumeFetchTopics(r.topic)
	return false
}

// close leaves the group at once (so that another member takes the
// partitions without waiting for the session timeout) and closes the
// client, all within ctx: when it ends, the client's requests are
// aborted. Every receiver has committed and left before, so no Receive
// polls the client.
func (m *member) close(ctx context.Context) {
	defer m.kill()
	defer context.AfterFunc(ctx, m.kill)()
	ctx, cancel := context.WithTimeout(ctx, brokerTimeout)
	defer cancel()
	if err := m.cl.LeaveGroupContext(ctx); err != nil && !isCtxErr(err) {
		m.log.Warn("relay/kafka: leaving the group", "err", err)
	}
	m.cl.Close()
}

// await waits until r's queue may hold something: it polls the client
// for every topic when no other Receive does (waiting for records, or for
// a sibling's full queue to make room or be paused), otherwise it waits
// for the records the polling Receive queues for r. A poll ends early
// when r is signalled (a nack to redeliver). It returns false when ctx
// ends.
func (m *member) await(ctx context.Context, r *receiver) bool {
	select {
	case <-r.ahead.Ready():
		return true
	case m.poller <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-m.poller }()
	if m.full(time.Now()) {
		t := time.NewTimer(queueGrace / 4)
		defer t.Stop()
		select {
		case <-r.ahead.Ready():
		case <-m.room:
		case <-t.C:
		case <-ctx.Done():
			return false
		}
		return true
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !r.pollingWith(cancel) {
		return true // something to deliver arrived meanwhile
	}
	fs := m.cl.PollRecords(pctx, m.pollSize())
	r.pollingWith(nil)
	m.dispatch(fs)
	m.cl.AllowRebalance()
	return ctx.Err() == nil
}

// drain moves what the client has buffered into the queues, without
// waiting, unless another Receive is polling or some topic's queue is
// full. The client sends its next fetch only once the buffered one is
// taken, so draining at every Receive overlaps fetching with delivery.
func (m *member) drain() {
	if m.cl.BufferedFetchRecords() == 0 {
		return
	}
	select {
	case m.poller <- struct{}{}:
	default:
		return
	}
	defer func() { <-m.poller }()
	if m.full(time.Now()) {
		return
	}
	//lint:ignore SA1012 PollRecords with a nil ctx takes what is buffered and returns without waiting
	m.dispatch(m.cl.PollRecords(nil, m.pollSize()))
	m.cl.AllowRebalance()
}

// pollSize is how many records the next poll takes (see pollSizeFor).
func (m *member) pollSize() int {
	return m.pollSizeFor(int(m.cl.BufferedFetchRecords()), int(m.cl.BufferedFetchBytes()))
}

// pollSizeFor is how many records the next poll takes, given what the
// client has buffered: all of it when every fetched topic's read-ahead can
// take it whole (ReadAhead.TakesWhole), otherwise what every such
// read-ahead has room for (ReadAhead.Room), at most max(64, the largest
// window). Records beyond it
// stay in the client's buffer. The count, not "all", bounds the poll, so
// that a fetch that replaced the buffered one meanwhile (a rebalance
// drops a buffered fetch) is not taken whole unchecked.
func (m *member) pollSizeFor(records, bytes int) int {
	n := max(64, m.d.maxWindow)
	whole := records > 0
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.recvs {
		r.mu.Lock()
		if !r.topicPaused {
			n = r.ahead.Room(n)
			whole = whole && r.ahead.TakesWhole(records, bytes)
		}
		r.mu.Unlock()
	}
	if whole {
		return max(n, records)
	}
	return n
}

func (m *member) roomMade() {
	select {
	case m.room <- struct{}{}:
	default:
	}
}

// full reports whether some fetched topic's queue holds a window; it
// pauses those that have waited too long, when the member has others.
func (m *member) full(now time.Time) bool {
	m.mu.Lock()
	shared := len(m.recvs) > 1
	var pause []string
	blocked := false
	for _, r := range m.recvs {
		r.mu.Lock()
		if !r.topicPaused && r.ahead.Full() {
			if oldest, _ := r.ahead.Peek(); shared && now.Sub(oldest.queued) >= queueGrace {
				r.topicPaused = true
				pause = append(pause, r.topic)
			} else {
				blocked = true
			}
		}
		r.mu.Unlock()
	}
	m.mu.Unlock()
	if len(pause) > 0 {
		m.cl.PauseFetchTopics(pause...)
		m.log.Debug("relay/kafka: pausing topics whose subscriptions fall behind", "topics", pause)
	}
	return blocked
}

func (m *member) receiver(topic string) *receiver {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recvs[topic]
}

func (m *member) dispatch(fs kgo.Fetches) {
	fs.EachError(func(t string, p int32, err error) {
		if isCtxErr(err) {
			return
		}
		if errors.Is(err, kgo.ErrClientClosed) {
			err = fmt.Errorf("relay/kafka: %w: %w", relay.ErrClosed, err)
		} else if t == "" {
			err = fmt.Errorf("relay/kafka: consuming for group %q: %w", m.d.cfg.Group, err)
		} else {
			err = fmt.Errorf("relay/kafka: fetching %s[%d]: %w", t, p, err)
		}
		if r := m.receiver(t); r != nil {
			r.fetchError(err)
		} else if t == "" {
			m.mu.Lock()
			rs := make([]*receiver, 0, len(m.recvs))
			for _, r := range m.recvs {
				rs = append(rs, r)
			}
			m.mu.Unlock()
			for _, r := range rs {
				r.fetchError(err)
			}
		}
	})
	fs.EachTopic(func(ft kgo.FetchTopic) {
		r := m.receiver(ft.Topic)
		if r == nil {
			return // purged meanwhile; the group delivers the records again
		}
		r.register(ft)
	})
}

// onRevoked commits what is acked on the partitions leaving this member
// and drops their state, topic by topic. It runs on the client's group
// goroutine, with polls blocked.
func (m *member) onRevoked(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	for topic, parts := range lost {
		if r := m.receiver(topic); r != nil {
			r.drop(parts, true)
		}
	}
}

// onLost drops the state of partitions this member no longer owns; a
// commit would be refused, so none is tried.
func (m *member) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	for topic, parts := range lost {
		if r := m.receiver(topic); r != nil {
			r.drop(parts, false)
		}
	}
}

// commitStart commits listed as the group's position on topic through
// this member, which Kafka requires while the group has members. It waits
// for a join in progress.
func (m *member) commitStart(ctx context.Context, topic string, listed kadm.ListedOffsets) error {
	offsets := map[int32]kgo.EpochOffset{}
	listed.Each(func(l kadm.ListedOffset) {
		if l.Topic == topic {
			offsets[l.Partition] = kgo.EpochOffset{Epoch: -1, Offset: l.Offset}
		}
	})
	var cerr error
	m.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil && cerr == nil {
						cerr = e
					}
				}
			}
		})
	return cerr
}
