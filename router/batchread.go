package router

import (
	"sync"
	"time"

	"github.com/go-relay/relay"
)

// batchReader hands a batch handler the subscription's messages a batch
// at a time. When the subscriber has the shared layer's batch path
// (driver.BatchSubscriber) it takes the batches the broker returned, one
// channel operation each, splitting and joining them to the batch size;
// otherwise it reads the message channel one message at a time.
type batchReader struct {
	h       *handler
	ch      <-chan *relay.Message   // without the batch path
	batches <-chan []*relay.Message // with it
	rest    []*relay.Message        // taken from batches, not yet handed out
	timer   *time.Timer             // for the batch wait; nil without one
}

func newBatchReader(h *handler) *batchReader {
	b := &batchReader{h: h, ch: h.ch, batches: h.batches}
	if h.bcfg.wait > 0 {
		b.timer = time.NewTimer(h.bcfg.wait)
		b.timer.Stop()
	}
	return b
}

func (b *batchReader) stop() {
	if b.timer != nil {
		b.timer.Stop()
	}
}

// unstartedRest nacks what was taken and not handed out.
func (b *batchReader) unstartedRest() {
	for _, m := range b.rest {
		b.h.unstarted(m)
	}
	b.rest = nil
}

// take returns the next batch: it waits for a first message, then adds
// what arrives until the batch holds max messages or the batch wait has
// passed (with no wait: until nothing more is ready). ok is false when the
// router stops before a first message or the subscription ended; batch
// then holds what was taken and not handled, for the caller to nack.
func (b *batchReader) take(max int) (batch []*relay.Message, ok bool) {
	first, ok := b.first(max)
	if !ok {
		return nil, false
	}
	batch = first
	if b.timer == nil {
		for len(batch) < max {
			more, open, ready := b.ready(max - len(batch))
			if !open {
				b.h.subscriptionEnded()
				return batch, false
			}
			if !ready {
				break
			}
			batch = append(batch, more...)
		}
		return batch, true
	}
	b.timer.Reset(b.h.bcfg.wait)
	defer b.timer.Stop()
	for len(batch) < max {
		more, open, waited := b.wait(max - len(batch))
		if !open {
			b.h.subscriptionEnded()
			return batch, false
		}
		batch = append(batch, more...)
		if waited {
			break
		}
	}
	return batch, true
}

// first waits for at least one message and returns up to max.
func (b *batchReader) first(max int) ([]*relay.Message, bool) {
	if len(b.rest) > 0 {
		return b.split(b.rest, max), true
	}
	if b.batches == nil {
		m, ok := b.h.next()
		if !ok {
			return nil, false
		}
		out := make([]*relay.Message, 1, min(max, batchPrealloc))
		out[0] = m
		return out, true
	}
	select {
	case <-b.h.r.stopping:
		return nil, false
	case got, open := <-b.batches:
		if !open {
			b.h.subscriptionEnded()
			return nil, false
		}
		return b.split(got, max), true
	}
}

// ready returns up to max messages that are ready without waiting; ready
// is false when there are none, open false when the subscription ended.
func (b *batchReader) ready(max int) (msgs []*relay.Message, open, ready bool) {
	if b.batches == nil {
		select {
		case m, open := <-b.ch:
			if !open {
				return nil, false, false
			}
			return []*relay.Message{m}, true, true
		default:
			return nil, true, false
		}
	}
	select {
	case got, open := <-b.batches:
		if !open {
			return nil, false, false
		}
		return b.split(got, max), true, true
	default:
		return nil, true, false
	}
}

// wait returns up to max messages once some arrive, or none once the
// batch wait has passed (waited) or the router stops.
func (b *batchReader) wait(max int) (msgs []*relay.Message, open, waited bool) {
	if b.batches == nil {
		select {
		case <-b.h.r.stopping:
			return nil, true, true
		case <-b.timer.C:
			return nil, true, true
		case m, open := <-b.ch:
			if !open {
				return nil, false, false
			}
			return []*relay.Message{m}, true, false
		}
	}
	select {
	case <-b.h.r.stopping:
		return nil, true, true
	case <-b.timer.C:
		return nil, true, true
	case got, open := <-b.batches:
		if !open {
			return nil, false, false
		}
		return b.split(got, max), true, false
	}
}

// split returns the first max messages of got and keeps the rest. The
// part returned has no spare capacity, so appending to it never writes
// into the rest.
func (b *batchReader) split(got []*relay.Message, max int) []*relay.Message {
	if len(got) <= max {
		b.rest = nil
		return got
	}
	b.rest = got[max:]
	return got[:max:max]
}

// runBatchLanes handles batches in WithBatchConcurrency lanes: a dispatcher
// takes batches, hands the messages with a Key to the lane their Key
// hashes to and those without one to any lane, and every lane joins what
// waits for it into batches of at most the batch size and handles them one
// at a time. So a Key's messages are handled in delivery order, one batch
// after another, while other lanes go on.
func (h *handler) runBatchLanes() {
	defer h.wg.Done()
	rd := newBatchReader(h)
	defer rd.stop()
	n := h.bcfg.concurrency
	own := make([]chan []*relay.Message, n)
	for i := range own {
		own[i] = make(chan []*relay.Message, 2)
	}
	shared := make(chan []*relay.Message, n)
	var lanes sync.WaitGroup
	lanes.Add(n)
	for i := range own {
		go h.runBatchLane(own[i], shared, &lanes)
	}
	defer func() {
		// Lanes stop after their current batch; what waits in the queues
		// was not started and goes back to the group.
		lanes.Wait()
		rd.unstartedRest()
		for _, q := range append(own, shared) {
			close(q)
			for msgs := range q {
				for _, m := range msgs {
					h.unstarted(m)
				}
			}
		}
	}()
	parts := make([][]*relay.Message, n)
	for {
		batch, ok := rd.take(h.bcfg.size)
		if !ok || h.stopped() {
			for _, m := range batch {
				h.unstarted(m)
			}
			return
		}
		var keyless []*relay.Message
		for _, m := range batch {
			if m.Key == "" {
				keyless = append(keyless, m)
				continue
			}
			i := fnv32a(m.Key) % uint32(n)
			parts[i] = append(parts[i], m)
		}
		if !h.handOut(own, parts, shared, keyless) {
			return
		}
	}
}

// handOut queues the parts of one batch on their lanes, and keyless on the
// shared queue. It reports false when the router stops first; what was not
// queued is then nacked unstarted.
func (h *handler) handOut(own []chan []*relay.Message, parts [][]*relay.Message, shared chan []*relay.Message, keyless []*relay.Message) bool {
	stopped := false
	send := func(q chan []*relay.Message, msgs []*relay.Message) {
		if stopped {
			for _, m := range msgs {
				h.unstarted(m)
			}
			return
		}
		select {
		case q <- msgs:
		case <-h.r.stopping:
			stopped = true
			for _, m := range msgs {
				h.unstarted(m)
			}
		}
	}
	for i, p := range parts {
		if len(p) > 0 {
			send(own[i], p)
			parts[i] = nil
		}
	}
	if len(keyless) > 0 {
		send(shared, keyless)
	}
	return !stopped
}

// runBatchLane handles the batches of one lane: its own queue's (one
// Key's messages always come here) and the shared queue's.
func (h *handler) runBatchLane(own, shared <-chan []*relay.Message, lanes *sync.WaitGroup) {
	defer lanes.Done()
	size := h.bcfg.size
	for {
		var batch []*relay.Message
		select {
		case <-h.r.stopping:
			return
		case batch = <-own:
		case batch = <-shared:
		}
		// Join what else waits for this lane, up to the batch size; a
		// part that does not fit waits for the next batch.
	join:
		for len(batch) < size {
			select {
			case more := <-own:
				batch = h.joinOrHandle(batch, more)
			default:
				break join
			}
		}
		if h.stopped() {
			for _, m := range batch {
				h.unstarted(m)
			}
			return
		}
		h.processBatch(batch)
	}
}

// joinOrHandle appends more to batch when it fits; otherwise it handles
// batch first and returns more as the next batch.
func (h *handler) joinOrHandle(batch, more []*relay.Message) []*relay.Message {
	if len(batch)+len(more) <= h.bcfg.size {
		return append(batch[:len(batch):len(batch)], more...)
	}
	if h.stopped() {
		for _, m := range batch {
			h.unstarted(m)
		}
	} else {
		h.processBatch(batch)
	}
	return more
}
