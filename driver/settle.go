package driver

import (
	"context"
	"errors"
	"time"

	"github.com/go-relay/relay"
)

// The settlement side of a subscription: Settle records an application's
// Ack or Nack, the flush loop sends them to the broker in batches and
// frees their window slots, and the extend loop keeps the leases of held
// messages alive.

// Settle implements Settler. It runs on the goroutine that calls
// Ack/Nack and never blocks on the broker.
func (s *subscription) Settle(id uint64, st Settlement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return relay.ErrSubscriptionEnded
	}
	h, size, ok := s.unsettled.take(id)
	if !ok {
		return relay.ErrSubscriptionEnded
	}
	if s.bytes -= size; s.maxBytes > 0 && s.bytes < s.maxBytes && s.bytes+size >= s.maxBytes {
		signal(s.slotFreed) // the byte bound no longer holds Receive back
	}

	delay := st.Delay
	if !st.Ack && delay > 0 && (!s.native || (s.maxDelay > 0 && delay > s.maxDelay)) {
		// Emulate the delay: keep the message leased, nack it later. A
		// parked message does not count against the window.
		s.free++
		signal(s.slotFreed)
		dn := &delayedNack{handle: h}
		s.delayed[id] = dn
		dn.timer = time.AfterFunc(delay, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.ended || s.delayed[id] != dn {
				return
			}
			delete(s.delayed, id)
			s.pending = append(s.pending, Settle{Handle: dn.handle})
			signal(s.flushReq)
		})
		return nil
	}
	if st.Ack {
		delay = 0
	}
	s.pending = append(s.pending, Settle{Handle: h, Ack: st.Ack, Delay: delay})
	s.held++
	// Wake the flusher for the first settlement of a batch (it then
	// lingers), and again when the batch should go without waiting.
	if len(s.pending) == 1 || s.urgentLocked() {
		signal(s.flushReq)
	}
	return nil
}

// urgentLocked reports whether the flusher should look at the pending
// settlements before its linger ends: the batch is big enough, or nothing
// else is held, so no more settlements are coming soon (see
// flushWaitLocked).
func (s *subscription) urgentLocked() bool {
	return len(s.pending) >= s.flushAt || s.unsettled.len() == 0
}

// flushWaitLocked is how long the flusher may still wait before sending
// the pending settlements, lastFlush being when it last sent some and
// since when it began to wait for this batch: none for a full batch; for
// the settlements of a handler that holds nothing else, none when they
// hold a quarter of the window or more (the next Receive would ask for
// that much less), otherwise none unless the last flush was less than
// SettleLinger ago (a handler that keeps catching up with a busy stream
// then shares one broker call per SettleLinger, where it would make one
// per message or two: on a broker bound by its own CPU, such as RabbitMQ
// with its acks, those calls are what the consumer's rate pays for);
// otherwise what is left of SettleLinger since since.
func (s *subscription) flushWaitLocked(lastFlush, since time.Time) time.Duration {
	linger := s.parent.opts.SettleLinger
	switch {
	case len(s.pending) >= s.flushAt:
		return 0
	case s.unsettled.len() == 0:
		if s.held >= s.window/4 {
			return 0
		}
		return linger - time.Since(lastFlush)
	default:
		return linger - time.Since(since)
	}
}

// flushLoop sends settlements to the broker in batches: it lingers up to
// SettleLinger for a batch to fill unless it is full or the handler holds
// nothing else (see flushWaitLocked), and settlements made while a Settle
// call is in progress join the next batch. Window slots are freed after
// the broker call, so the window bounds what the broker sees as
// unacknowledged.
func (s *subscription) flushLoop(finish <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	linger := time.NewTimer(s.parent.opts.SettleLinger)
	linger.Stop()
	var lastFlush time.Time
	for {
		final := false
		select {
		case <-s.flushReq:
		case <-finish:
			final = true
		}
		for since := time.Now(); !final; {
			s.mu.Lock()
			wait := s.flushWaitLocked(lastFlush, since)
			s.mu.Unlock()
			if wait <= 0 {
				break
			}
			linger.Reset(wait)
			expired := false
			select {
			case <-linger.C:
				expired = true
			case <-s.flushReq: // the batch may have filled: look again
			case <-finish:
				final = true
			}
			linger.Stop()
			if expired {
				break
			}
		}
		lastFlush = time.Now()
		for {
			s.mu.Lock()
			batch, held := s.pending, s.held
			if len(batch) == 0 {
				s.mu.Unlock()
				break
			}
			s.pending, s.spare, s.held = s.spare[:0], nil, 0
			s.mu.Unlock()
			s.sendSettlements(batch)
			clear(batch) // drop the handles
			s.mu.Lock()
			s.free += held
			s.free += s.deferred // the grown slots: see growLocked
			s.deferred = 0
			if s.spare == nil && cap(batch) <= 2*s.window {
				s.spare = batch[:0]
			}
			s.mu.Unlock()
			signal(s.slotFreed)
		}
		if final {
			return
		}
	}
}

func (s *subscription) sendSettlements(batch []Settle) {
	var bo backoffState
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(s.broker, s.parent.opts.BrokerTimeout)
		err := s.r.Settle(ctx, batch)
		cancel()
		if err == nil {
			if s.committer != nil && holdsAck(batch) {
				s.commit()
			}
			return
		}
		if try == 3 || errors.Is(err, relay.ErrClosed) || s.broker.Err() != nil {
			s.log.Warn("relay: settling messages failed; the broker will redeliver them", "count", len(batch), "err", err)
			return
		}
		s.log.Debug("relay: settle failed; retrying", "err", err)
		bo.sleep(s.broker)
	}
}

func holdsAck(batch []Settle) bool {
	for _, st := range batch {
		if st.Ack {
			return true
		}
	}
	return false
}

// commit makes the Committer's commit after a settlement batch: at once,
// unless Options.CommitInterval leaves it to the commit loop, which also
// retries one that failed.
func (s *subscription) commit() {
	if s.parent.opts.CommitInterval <= 0 {
		ctx, cancel := context.WithTimeout(s.broker, s.parent.opts.BrokerTimeout)
		err := s.committer.Commit(ctx)
		cancel()
		if err == nil {
			return
		}
		s.log.Debug("relay: commit failed; retrying", "err", err)
	}
	signal(s.commitReq)
}

// commitLoop sends the commits that commit left to it, one at a time,
// each after Options.CommitInterval, retrying a failed one with backoff
// until it succeeds, until finish closes (a commit in flight then ends,
// within BrokerTimeout; the receiver's Close commits last).
func (s *subscription) commitLoop(finish <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx, stop := context.WithCancel(s.broker)
	defer stop()
	go func() {
		select {
		case <-finish:
			stop()
		case <-ctx.Done():
		}
	}()
	var bo backoffState
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.commitReq:
		}
		if d := s.parent.opts.CommitInterval; d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		for {
			// The commit itself runs under s.broker, not ctx: one in flight
			// when the subscription ends is finished, not cut off.
			cctx, cancel := context.WithTimeout(s.broker, s.parent.opts.BrokerTimeout)
			err := s.committer.Commit(cctx)
			cancel()
			if err == nil {
				bo.reset()
				break
			}
			s.log.Debug("relay: commit failed; retrying", "err", err, "attempt", bo.n+1)
			if !bo.sleep(ctx) {
				return
			}
		}
	}
}

func (s *subscription) extendLoop(ext Extender, finish <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(s.parent.opts.ExtendEvery)
	defer t.Stop()
	for {
		select {
		case <-finish:
			return
		case <-t.C:
		}
		s.mu.Lock()
		handles := s.unsettled.appendHandles(make([]any, 0, s.unsettled.len()+len(s.delayed)))
		for _, d := range s.delayed {
			handles = append(handles, d.handle)
		}
		s.mu.Unlock()
		if len(handles) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(s.broker, s.parent.opts.BrokerTimeout)
		if err := ext.Extend(ctx, handles); err != nil {
			s.log.Warn("relay: extending message leases failed", "count", len(handles), "err", err)
		}
		cancel()
	}
}
