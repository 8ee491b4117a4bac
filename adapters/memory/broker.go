package memory

import (
	"slices"
	"sync"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Retention bounds for messages published to a topic that has no group yet.
const (
	RetainMessages = 10_000
	RetainBytes    = 64 << 20
)

// broker is one named in-process broker; every mem://NAME of a process
// shares the broker NAME.
type broker struct {
	mu       sync.Mutex
	topics   map[string]*topic
	seq      uint64
	payloads driver.Arena // copies of published payloads
	groups   []*group     // scratch for publish
}

var brokers struct {
	sync.Mutex
	m map[string]*broker
}

func brokerNamed(name string) *broker {
	brokers.Lock()
	defer brokers.Unlock()
	if brokers.m == nil {
		brokers.m = map[string]*broker{}
	}
	b := brokers.m[name]
	if b == nil {
		b = &broker{topics: map[string]*topic{}}
		brokers.m[name] = b
	}
	return b
}

type topic struct {
	groups map[string]*group
	// retained holds messages published while the topic had no group.
	retained      []*entry
	retainedBytes int
	dropped       int
}

type entry struct {
	seq        uint64
	id, key    string
	md         relay.Metadata
	payload    []byte
	deliveries int
}

func (e *entry) size() int { return len(e.payload) + len(e.id) + len(e.key) }

// group is a queue of competing consumers.
type group struct {
	ready     []*entry      // ordered by seq
	wake      chan struct{} // closed and replaced whenever ready grows
	timers    map[*entry]*time.Timer
	delivered int // entries taken by subscriptions and not yet settled or released
}

func newGroup() *group { return &group{wake: make(chan struct{}), timers: map[*entry]*time.Timer{}} }

func (b *broker) topicLocked(name string) *topic {
	t := b.topics[name]
	if t == nil {
		t = &topic{groups: map[string]*group{}}
		b.topics[name] = t
	}
	return t
}

// groupFor returns the group, creating it (and handing it the topic's
// retained messages if it is the topic's first group).
func (b *broker) groupFor(topicName, name string) *group {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topicLocked(topicName)
	g := t.groups[name]
	if g == nil {
		g = newGroup()
		if len(t.groups) == 0 && len(t.retained) > 0 {
			g.ready = t.retained
			t.retained, t.retainedBytes = nil, 0
		}
		t.groups[name] = g
	}
	return g
}

// publish appends copies of msgs to every group of the topic, or to its
// retained messages when it has none. The entries of one call share one
// allocation per group, and small payloads share the broker's arena.
//
// A message with a DeliverAt in the future is held by a timer instead and
// published when due (ordered by then among the others); a process exit
// loses it, as it loses everything of mem://.
func (b *broker) publish(topicName string, msgs []*relay.Message) {
	msgs = b.holdDelayed(topicName, msgs)
	if len(msgs) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topicLocked(topicName)
	es := make([]entry, len(msgs))
	// Copies of every field: a published message's strings may share the
	// memory of a message received elsewhere (kafka:// share_payloads),
	// which the entry must not pin.
	p := &b.payloads
	for i, m := range msgs {
		b.seq++
		es[i] = entry{seq: b.seq, id: p.CloneString(m.ID), key: p.CloneString(m.Key), md: p.CloneMetadata(m.Metadata), payload: p.Bytes(m.Payload)}
	}
	if len(t.groups) == 0 {
		for i := range es {
			e := &es[i]
			t.retained = append(t.retained, e)
			t.retainedBytes += e.size()
		}
		for len(t.retained) > RetainMessages || t.retainedBytes > RetainBytes {
			t.retainedBytes -= t.retained[0].size()
			t.retained[0] = nil
			t.retained = t.retained[1:]
			t.dropped++
		}
		return
	}
	groups := b.groups[:0]
	for _, g := range t.groups {
		groups = append(groups, g)
	}
	for i, g := range groups {
		ges := es
		if i > 0 { // each group counts its own deliveries
			ges = slices.Clone(es)
		}
		g.ready = slices.Grow(g.ready, len(ges))
		for j := range ges {
			g.ready = append(g.ready, &ges[j])
		}
		g.notify()
	}
	clear(groups)
	b.groups = groups[:0]
}

// holdDelayed starts a timer for each message of msgs due later and
// returns the others (msgs itself when none is delayed).
func (b *broker) holdDelayed(topicName string, msgs []*relay.Message) []*relay.Message {
	var now time.Time
	for i, m := range msgs {
		if m.DeliverAt.IsZero() {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		if _, ok := driver.Delay(m, now); !ok {
			continue
		}
		rest := slices.Clone(msgs[:i])
		for _, m := range msgs[i:] {
			delay, ok := driver.Delay(m, now)
			if !ok {
				rest = append(rest, m)
				continue
			}
			due := m.Copy()
			due.DeliverAt = time.Time{}
			time.AfterFunc(delay, func() { b.publish(topicName, []*relay.Message{due}) })
		}
		return rest
	}
	return msgs
}

func (g *group) notify() {
	close(g.wake)
	g.wake = make(chan struct{})
}

// requeueLocked puts e back in publish order, so a redelivered message
// keeps its place relative to messages of the same key.
func (g *group) requeueLocked(e *entry) {
	i, _ := slices.BinarySearchFunc(g.ready, e.seq, func(x *entry, s uint64) int {
		switch {
		case x.seq < s:
			return -1
		case x.seq > s:
			return 1
		}
		return 0
	})
	g.ready = slices.Insert(g.ready, i, e)
	g.notify()
}

// requeue hands a delivered entry back to its group, after delay.
func (b *broker) requeue(g *group, e *entry, delay time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g.delivered--
	if delay <= 0 {
		g.requeueLocked(e)
		return
	}
	g.timers[e] = time.AfterFunc(delay, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := g.timers[e]; !ok {
			return
		}
		delete(g.timers, e)
		g.requeueLocked(e)
	})
}

// take appends up to max ready entries to buf and returns it, or returns
// the channel to wait on when there are none.
func (b *broker) take(g *group, max int, buf []*entry) ([]*entry, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(g.ready) == 0 {
		return buf, g.wake
	}
	n := min(max, len(g.ready))
	start := len(buf)
	buf = append(buf, g.ready[:n]...)
	clear(g.ready[:n])
	g.ready = g.ready[n:]
	for _, e := range buf[start:] {
		e.deliveries++
	}
	g.delivered += n
	return buf, nil
}

// acked records that n delivered entries of g were acknowledged.
func (b *broker) acked(g *group, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g.delivered -= n
}

// lag counts the messages of topicName that group name has not acked:
// ready, waiting out a Nack delay, or delivered and unsettled. A group that
// does not exist yet counts the retained messages it would receive as the
// topic's first group, and nothing otherwise.
func (b *broker) lag(topicName, name string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[topicName]
	if t == nil {
		return 0
	}
	g := t.groups[name]
	if g == nil {
		if len(t.groups) == 0 {
			return int64(len(t.retained))
		}
		return 0
	}
	return int64(len(g.ready) + len(g.timers) + g.delivered)
}

// remove forgets topicName: its groups, their messages and its retained
// messages. Pending NackAfter timers are stopped.
func (b *broker) remove(topicName string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[topicName]
	if t == nil {
		return
	}
	for _, g := range t.groups {
		for e, tm := range g.timers {
			tm.Stop()
			delete(g.timers, e)
		}
	}
	delete(b.topics, topicName)
}
