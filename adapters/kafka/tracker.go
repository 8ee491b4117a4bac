package kafka

import (
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partState tracks the delivered records of one assigned partition, in
// offset order, so that the commit position only ever covers the
// contiguous prefix of acked records: acking offset 12 while 11 is unacked
// commits nothing past 11.
//
// A partState lives from the first record polled after an assignment to
// the revocation of the partition; handles of an older partState are
// stale and their settlement is ignored. A delay mover tracks its routed
// records the same way. Not safe for concurrent use (the owner's mutex
// guards it).
type partState struct {
	part    int32
	entries []entry // outstanding records; entries[head:] are live
	head    int

	target    kgo.EpochOffset // next offset to consume once committed; Offset -1: nothing acked yet
	committed int64           // the last target the broker confirmed; -1: none
	paused    bool            // fetching paused because too many records are held
	revoked   bool            // the partition was revoked (or the receiver closed): this state is stale
	headSince time.Time       // when the target last moved (or the state began)
}

type entry struct {
	offset  int64
	epoch   int32
	attempt int32 // deliveries so far
	acked   bool
}

func newPartState(part int32) *partState {
	return &partState{part: part, target: kgo.EpochOffset{Epoch: -1, Offset: -1}, committed: -1, headSince: time.Now()}
}

// stuck reports whether more than max records wait behind an unacked one
// that has held the commit position for longer than grace. The grace keeps
// acks that are merely on their way (settlements are applied in batches)
// from counting as a stuck record.
func (p *partState) stuck(max int, grace time.Duration, now time.Time) bool {
	return p.pending() >= max && now.Sub(p.headSince) >= grace
}

// add records a delivered record. Records arrive in increasing offset
// order; an offset at or below the last one (the broker truncated the log
// and the client rewound) drops the entries it replaces.
func (p *partState) add(offset int64, epoch int32, attempt int32) {
	if n := len(p.entries); n > p.head && p.entries[n-1].offset >= offset {
		i := p.search(offset)
		p.entries = p.entries[:i]
		if p.head > i {
			p.head = i
		}
	}
	p.entries = append(p.entries, entry{offset: offset, epoch: epoch, attempt: attempt})
}

// search returns the index of the first live entry with offset >= off.
func (p *partState) search(off int64) int {
	live := p.entries[p.head:]
	return p.head + sort.Search(len(live), func(i int) bool { return live[i].offset >= off })
}

// find returns the entry of offset, or nil. Offsets are usually dense
// (a gap needs compaction or transaction markers), so the entry is looked
// for first where a dense run would put it, and searched for only if it
// is not there.
func (p *partState) find(offset int64) *entry {
	if p.head < len(p.entries) {
		if d := offset - p.entries[p.head].offset; d >= 0 && d < int64(len(p.entries)-p.head) {
			if e := &p.entries[p.head+int(d)]; e.offset == offset {
				return e
			}
		}
	}
	i := p.search(offset)
	if i < len(p.entries) && p.entries[i].offset == offset {
		return &p.entries[i]
	}
	return nil
}

// ack marks offset as processed and reports whether the commit target moved.
func (p *partState) ack(offset int64) bool {
	e := p.find(offset)
	if e == nil || e.acked {
		return false
	}
	e.acked = true
	moved := false
	for p.head < len(p.entries) && p.entries[p.head].acked {
		h := p.entries[p.head]
		p.target = kgo.EpochOffset{Epoch: h.epoch, Offset: h.offset + 1}
		p.head++
		moved = true
	}
	p.compact()
	return moved
}

func (p *partState) compact() {
	switch {
	case p.head == len(p.entries):
		p.entries, p.head = p.entries[:0], 0
	case p.head >= 1024 && p.head*2 >= len(p.entries):
		n := copy(p.entries, p.entries[p.head:])
		p.entries, p.head = p.entries[:n], 0
	}
}

// pending is how many delivered records are not yet covered by the target.
func (p *partState) pending() int { return len(p.entries) - p.head }

// dirty reports whether the target is ahead of what the broker confirmed.
func (p *partState) dirty() bool { return p.target.Offset > p.committed }

// unacked calls fn for every delivered record that is not acked.
func (p *partState) unacked(fn func(e entry)) {
	for _, e := range p.entries[p.head:] {
		if !e.acked {
			fn(e)
		}
	}
}
