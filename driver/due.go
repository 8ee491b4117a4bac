package driver

import (
	"sync"
	"time"

	"github.com/go-relay/relay"
)

func holdsUntilDue(d any) bool {
	h, ok := d.(DueHolder)
	return ok && h.HoldsUntilDue()
}

// stampDue returns msgs with each message due later replaced by a copy
// that carries DeliverAtHeader, and each other message carrying the
// reserved header by a copy without it; msgs itself when there is none.
func stampDue(msgs []*relay.Message) []*relay.Message {
	var out []*relay.Message
	var now time.Time
	for i, m := range msgs {
		_, reserved := m.Metadata[DeliverAtHeader]
		if m.DeliverAt.IsZero() && !reserved {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		_, delayed := Delay(m, now)
		if !delayed && !reserved {
			continue
		}
		if out == nil {
			out = append(make([]*relay.Message, 0, len(msgs)), msgs...)
		}
		md := m.Metadata.Clone()
		if delayed {
			if md == nil {
				md = make(relay.Metadata, 1)
			}
			md[DeliverAtHeader] = m.DeliverAt.UTC().Format(time.RFC3339Nano)
		} else {
			delete(md, DeliverAtHeader)
		}
		out[i] = &relay.Message{ID: m.ID, Key: m.Key, Metadata: md, Payload: m.Payload}
	}
	if out == nil {
		return msgs
	}
	return out
}

// holds counts, per topic and message ID, the deliveries a Subscriber
// held back because they were not due, so that Attempt can leave them
// out, on the delivery once due and on redeliveries after it. Entries
// are swept once they are holdSweepAge past due (whenever the table has
// doubled since the last sweep), so it holds the messages held within
// that time; a redelivery after that counts the holds again.
type holds struct {
	mu      sync.Mutex
	m       map[holdKey]holdCount
	sweepAt int
}

type holdKey struct{ topic, id string }

type holdCount struct {
	n   int
	due time.Time
}

// holdSweepAge is how long past due an entry is kept for a delivery that
// may still come.
const holdSweepAge = time.Hour

func (h *holds) add(topic, id string, due, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[holdKey]holdCount{}
		h.sweepAt = 1024
	}
	k := holdKey{topic, id}
	c := h.m[k]
	h.m[k] = holdCount{n: c.n + 1, due: due}
	if len(h.m) >= h.sweepAt {
		for k, c := range h.m {
			if now.Sub(c.due) > holdSweepAge {
				delete(h.m, k)
			}
		}
		h.sweepAt = max(1024, 2*len(h.m))
	}
}

// count returns the holds of the message.
func (h *holds) count(topic, id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[holdKey{topic, id}].n
}

// holdDue splits batch, for a subscription whose driver holds until due:
// it returns the messages to deliver (kept, reusing keep's array) with
// DeliverAtHeader removed and their Attempt corrected, and appends a
// delayed nack of each message not due yet to held.
func (s *subscription) holdDue(batch, keep []Received, held []Settle) ([]Received, []Settle) {
	keep = keep[:0]
	var now time.Time
	for _, rc := range batch {
		v, ok := rc.Msg.Metadata[DeliverAtHeader]
		if !ok {
			keep = append(keep, rc)
			continue
		}
		due, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			keep = append(keep, rc) // not ours: deliver it as it is
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		if wait := due.Sub(now); wait > 0 {
			if s.maxDelay > 0 {
				wait = min(wait, s.maxDelay)
			}
			held = append(held, Settle{Handle: rc.Handle, Delay: wait})
			s.parent.holds.add(s.topic, rc.Msg.ID, due, now)
			continue
		}
		delete(rc.Msg.Metadata, DeliverAtHeader)
		if len(rc.Msg.Metadata) == 0 {
			rc.Msg.Metadata = nil
		}
		rc.Attempt = max(1, rc.Attempt-s.parent.holds.count(s.topic, rc.Msg.ID))
		keep = append(keep, rc)
	}
	return keep, held
}
