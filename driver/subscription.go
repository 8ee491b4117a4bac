package driver

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/deliveryhook"
)

// delayedNack is a message whose NackAfter the subscription emulates.
type delayedNack struct {
	handle any
	timer  *time.Timer
}

// subscription is one Subscribe call: the receive loop filling the window,
// the settlements of its messages, the flush and extend loops, and the
// teardown that flushes and releases when it ends.
type subscription struct {
	parent *Subscriber
	topic  string
	r      Receiver
	ctx    context.Context
	cancel context.CancelFunc
	// broker is the parent of every broker call's ctx: live while the
	// subscription runs, done CloseTimeout after its teardown began.
	broker     context.Context
	brokerEnd  context.CancelFunc
	stopAfter  func() bool
	out        chan *relay.Message   // one of out and outBatches is set
	outBatches chan []*relay.Message // the batch path (SubscribeBatches)
	native     bool
	maxDelay   time.Duration
	hold       bool // the driver holds delayed messages until due (DueHolder)
	log        *slog.Logger

	// window is the most unsettled messages: Options.InFlight, or less
	// when the receiver is a WindowLimiter; an adaptive window grows up to
	// maxWindow (see growLocked). Both change only with mu held.
	window    int
	maxWindow int

	mu        sync.Mutex
	ended     bool
	free      int       // window slots: window minus unsettled, unflushed settlements and reserved
	reserved  int       // slots reserved by Receive calls in progress
	flushAt   int       // pending settlements that trigger a flush without lingering
	held      int       // slots held by pending settlements, freed once they are flushed
	deferred  int       // slots the window grew by while its batch was out (see growLocked), freed by the next flush
	bytes     int64     // bytes of the delivered, unsettled messages
	maxBytes  int64     // Options.InFlightBytes; <= 0: no byte bound
	sizeGuess SizeGuess // of recent batches, for sizing a Receive
	unsettled slotTable // handles of delivered messages by token
	delayed   map[uint64]*delayedNack
	pending   []Settle
	spare     []Settle // the previous batch's array, reused by pending
	recvErr   error    // latest Receive error, nil after a success
	slotFreed chan struct{}
	flushReq  chan struct{}
	// committer is r when it is a Committer; commitReq asks its commit
	// loop for a commit (see commitLoop).
	committer Committer
	commitReq chan struct{}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (s *subscription) run() {
	defer s.parent.subs.Done()
	defer s.stopAfter()
	defer func() {
		s.parent.mu.Lock()
		delete(s.parent.active, s)
		s.parent.mu.Unlock()
	}()

	flushDone := make(chan struct{})
	finish := make(chan struct{})
	go s.flushLoop(finish, flushDone)
	extendDone := make(chan struct{})
	if ext, ok := s.r.(Extender); ok && s.parent.opts.ExtendEvery > 0 {
		go s.extendLoop(ext, finish, extendDone)
	} else {
		close(extendDone)
	}
	commitDone := make(chan struct{})
	if s.committer != nil {
		go s.commitLoop(finish, commitDone)
	} else {
		close(commitDone)
	}

	s.receive()
	// From here on, one deadline bounds the final settlements, the release
	// and the receiver's Close.
	deadline := time.AfterFunc(s.parent.opts.CloseTimeout, s.brokerEnd)
	defer func() {
		deadline.Stop()
		s.brokerEnd()
	}()
	// The channel closes last, so that a closed channel means the broker
	// has every settlement and every released message: a new subscription
	// of the group started after it sees them.
	defer func() {
		// Messages still buffered were released with the rest; drop them
		// so nobody reads them from the closed channel.
		if s.outBatches != nil {
			for drained := false; !drained; {
				select {
				case <-s.outBatches:
				default:
					drained = true
				}
			}
			close(s.outBatches)
			return
		}
		for drained := false; !drained; {
			select {
			case <-s.out:
			default:
				drained = true
			}
		}
		close(s.out)
	}()
	s.cancel()

	s.mu.Lock()
	s.ended = true
	release := s.unsettled.appendHandles(nil)
	for _, d := range s.delayed {
		d.timer.Stop()
		release = append(release, d.handle)
	}
	s.unsettled, s.delayed = slotTable{}, nil
	s.mu.Unlock()

	close(finish)
	<-flushDone
	<-extendDone
	<-commitDone
	if len(release) > 0 {
		ctx, cancel := context.WithTimeout(s.broker, s.parent.opts.BrokerTimeout)
		if err := s.r.Release(ctx, release); err != nil {
			s.log.Warn("relay: releasing unsettled messages failed; the broker redelivers them after its timeout", "count", len(release), "err", err)
		}
		cancel()
	}
	if err := s.r.Close(s.broker); err != nil {
		s.log.Warn("relay: closing subscription", "err", err)
	}
}

// roomLocked is how many messages the next Receive may ask for: the free
// window slots, fewer when the byte bound allows fewer messages of the
// recent size (counting those that Receive calls in progress may bring)
// or when they would make more than a callShare of the bound,
// 0 while not one more of them fits (but never 0 because of bytes when
// nothing is held or being received, so that one message larger than the
// bound still flows). Before the first batch, when no size is known, one
// message is asked for, by one call at a time. Called with s.mu held.
func (s *subscription) roomLocked() int {
	n := s.free
	if s.maxBytes <= 0 || n <= 0 {
		return n
	}
	if !s.sizeGuess.Known() {
		if s.reserved > 0 {
			return 0 // wait for the size the call in progress brings
		}
		return 1
	}
	fit := s.sizeGuess.Fit(s.maxBytes-s.bytes) - int64(s.reserved)
	if fit <= 0 {
		if s.unsettled.len() == 0 && s.reserved == 0 {
			return 1
		}
		return 0
	}
	perCall := max(1, s.sizeGuess.Fit(s.maxBytes/callShare))
	return int(min(int64(n), fit, perCall))
}

// callShare: one Receive asks for at most 1/callShare of the byte bound
// (by the recent size), so that a call's reply, which a client library
// may briefly buffer two or three times over while decoding it, stays
// small beside the window. Messages that small that the count window is
// reached first are not affected.
const callShare = 4

// receive runs the receive loops until the subscription ends: one, or as
// many as the receiver's ReceiveLimits allow, sharing the window. When one
// loop ends (ctx done, or the backend ended the subscription), the others
// are stopped.
func (s *subscription) receive() {
	perCall, loops := 0, 1
	if l, ok := s.r.(ReceiveLimiter); ok {
		perCall, loops = l.ReceiveLimits()
		loops = max(1, min(loops, s.window))
	}
	if loops == 1 {
		s.receiveLoop(perCall, true)
		return
	}
	var wg sync.WaitGroup
	wg.Add(loops)
	for range loops {
		go func() {
			defer wg.Done()
			s.receiveLoop(perCall, false)
			s.cancel()
		}()
	}
	wg.Wait()
}

// receiveLoop calls Receive for what the window has room for (at most
// perCall messages when positive), reserving the slots for the call so
// that concurrent loops never ask for more than the window holds, and
// delivers what it returns. A loop alone on its subscription waits
// (up to maxFillWait) rather than ask for a small part of a window its
// driver settles whole (see partialLocked).
func (s *subscription) receiveLoop(perCall int, alone bool) {
	var bo backoffState
	var (
		msgs   []*relay.Message // reused from batch to batch
		tokens []uint64
		keep   []Received // with hold: the messages of a batch that are due
		held   []Settle   // with hold: the nacks of those that are not
	)
	done := s.ctx.Done()
	// After a call that probed the message size (see roomLocked) brought
	// a message, the next one first waits for it to be settled (see
	// maxProbeWait).
	probeWait := min(s.parent.opts.SettleLinger, maxProbeWait)
	probed := false
	_, follower := s.r.(WindowFollower)
	var filling time.Time // since when the loop waits for the window to fill
	for {
		if probed {
			probed = false
			if !s.awaitOutstanding(probeWait) {
				return
			}
		}
		s.mu.Lock()
		n := s.roomLocked()
		if perCall > 0 {
			n = min(n, perCall)
		}
		if n > 0 && alone && s.partialLocked() {
			if filling.IsZero() {
				filling = time.Now()
			}
			if wait := maxFillWait - time.Since(filling); wait > 0 {
				s.mu.Unlock()
				if !s.awaitSlots(wait, func() bool { return !s.partialLocked() }) {
					return
				}
				continue
			}
		}
		filling = time.Time{}
		if n <= 0 {
			// The whole window is out (not the byte bound holding Receive
			// back): if the handler has settled all of it by the time
			// slots come back, it waited for the window.
			full := s.free <= 0 && s.window < s.maxWindow
			s.mu.Unlock()
			select {
			case <-s.ctx.Done():
				return
			case <-s.slotFreed:
			}
			if full {
				s.mu.Lock()
				grown := 0
				if s.unsettled.len() == 0 && s.reserved == 0 {
					grown = s.growLocked(false)
				}
				s.mu.Unlock()
				if grown > 0 {
					s.followWindow(grown)
				}
			}
			continue
		}
		probe := s.maxBytes > 0 && !s.sizeGuess.Known()
		s.free -= n
		s.reserved += n
		if s.roomLocked() > 0 {
			signal(s.slotFreed) // room for another loop's call too
		}
		s.mu.Unlock()
		batch, err := s.r.Receive(s.ctx, n)
		probed = probe && len(batch) > 0
		s.mu.Lock()
		s.reserved -= n
		s.free += n - len(batch)
		s.mu.Unlock()
		if len(batch) < n {
			signal(s.slotFreed)
		}
		if s.ctx.Err() != nil && len(batch) == 0 {
			return
		}
		if err != nil {
			if errors.Is(err, relay.ErrClosed) {
				s.log.Error("relay: subscription ended by the backend", "err", err)
				return
			}
			s.mu.Lock()
			s.recvErr = err
			s.mu.Unlock()
			s.log.Warn("relay: receive failed; retrying", "err", err, "attempt", bo.n+1)
			if !bo.sleep(s.ctx) {
				return
			}
			continue
		}
		bo.reset()
		s.mu.Lock()
		s.recvErr = nil
		s.mu.Unlock()
		if s.hold {
			keep, held = s.holdDue(batch, keep, held[:0])
			batch = keep
		}
		msgs, tokens = msgs[:0], tokens[:0]
		var largest int64
		s.mu.Lock()
		if len(held) > 0 {
			// Not due: nacked with the time remaining, holding a slot only
			// until the nacks are flushed.
			s.pending = append(s.pending, held...)
			s.held += len(held)
			clear(held)
			held = held[:0]
			signal(s.flushReq)
		}
		// A full batch (the broker has more) that finds every message
		// before it settled: the handler waited for this one. A broker
		// that holds the window itself counts the messages on their way
		// too, so a batch is seldom full there: one that finds the handler
		// idle while its settlements wait for their flush says the same.
		grown := 0
		if !probe && n > 0 && s.unsettled.len() == 0 && s.window < s.maxWindow &&
			(len(batch) == n || follower && len(batch) > 0 && s.held > 0) {
			grown = s.growLocked(s.flushAt >= s.window)
		}
		for _, rc := range batch {
			size := int64(EncodedSize(rc.Msg))
			largest = max(largest, size)
			s.bytes += size
			tokens = append(tokens, s.unsettled.put(rc.Handle, size))
			msgs = append(msgs, rc.Msg)
		}
		if len(batch) > 0 { // an empty answer says nothing about sizes
			s.sizeGuess.Observe(largest)
		}
		if s.roomLocked() > 0 {
			signal(s.slotFreed) // a loop waiting for the size may go on
		}
		s.mu.Unlock()
		if grown > 0 {
			s.followWindow(grown)
		}
		// The messages are nobody else's until sent: no lock needed.
		deliveryhook.AttachBatch(msgs, deliveryhook.Params{Topic: s.topic, Ctx: s.ctx, Settler: s}, func(i int) (int, uint64, deliveryhook.Position) {
			return max(batch[i].Attempt, 1), tokens[i], positionOf(batch[i].Position)
		})
		if s.outBatches != nil {
			if len(msgs) == 0 {
				continue
			}
			out := slices.Clone(msgs)
			clear(msgs)
			if s.ctx.Err() != nil {
				return
			}
			select {
			case s.outBatches <- out:
			case <-done:
				return
			}
			continue
		}
		for i, m := range msgs {
			msgs[i] = nil
			if s.ctx.Err() != nil {
				return
			}
			select { // the common case, without the cost of a two-way select
			case s.out <- m:
				continue
			default:
			}
			select {
			case s.out <- m:
			case <-done:
				return
			}
		}
	}
}

// partialLocked reports whether a Receive now would take only a small
// part of a window that the driver settles whole (SettleBatch is the
// window): less than half of it is free, while the handler still holds
// messages or their settlements wait for the flush that frees the rest.
// Asking for that part splits the window (the flusher lingers at most
// SettleLinger for the whole batch, and a handler slower than that per
// window has part of it flushed first) into parts that are received and
// settled apart, window after window, for as long as the backlog lasts:
// more receive calls and settlements, each costing the broker a claim,
// a pull or a commit. Called with s.mu held.
func (s *subscription) partialLocked() bool {
	return s.flushAt >= s.window && s.free < (s.window-s.deferred)/2 && (s.unsettled.len() > 0 || s.held > 0)
}

// maxFillWait bounds how long a receive loop waits for half a
// whole-settled window to be free (see partialLocked) before it asks for
// what is free: a handler that holds more than half the window until
// more messages come (one that collects a batch) gets them after this
// wait; a handler that acks is much sooner. A variable for tests only.
var maxFillWait = 20 * time.Millisecond

// maxProbeWait bounds how long the receive loop waits, after the call
// that probed the message size, for the probed message to be settled
// before it asks for the rest of the window (SettleLinger when shorter).
// Asking at once splits the window into the probed message and the rest,
// whose settlements are flushed apart when a Receive takes longer than
// SettleLinger; with the whole window settled at once, that split
// persists window after window (a claim of one message, then one of the
// rest: two broker calls where one does). The wait is short against a
// handler that holds its
// message, such as one that collects a batch before it acks. A variable
// for tests only.
var maxProbeWait = time.Millisecond

// awaitOutstanding waits up to d until no window slot is held by a
// delivered message, a pending settlement or a flush in progress (every
// slot is free or reserved by a Receive call). It returns false when the
// subscription ends first.
func (s *subscription) awaitOutstanding(d time.Duration) bool {
	return s.awaitSlots(d, func() bool { return s.free+s.reserved+s.deferred >= s.window })
}

// awaitSlots waits up to d until ready, called with s.mu held, reports
// true: it is asked at once and each time window slots are freed. It
// returns false when the subscription ends first.
func (s *subscription) awaitSlots(d time.Duration, ready func() bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		s.mu.Lock()
		ok := ready()
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-s.ctx.Done():
			return false
		case <-s.slotFreed:
		case <-t.C:
			return true
		}
	}
}

// growLocked doubles an adaptive window, up to maxWindow and to what the
// byte bound holds at the recent message size, keeping the settlement
// batch's share of it, and returns the new window (0 when it could not
// grow). With deferSlots the new slots are not free until the next
// flush, which a handler that keeps up makes once it settled the batch
// just received (see deferred): a driver that settles the whole window
// at once (SettleBatch) would otherwise receive them while that batch
// is out, splitting the window into two parts that then settle and
// refill apart, window after window (two receive calls and two
// settlements where one of each does). Called with s.mu held.
func (s *subscription) growLocked(deferSlots bool) int {
	next := min(2*s.window, s.maxWindow)
	if s.maxBytes > 0 && s.sizeGuess.Known() {
		next = min(next, int(max(1, s.sizeGuess.Fit(s.maxBytes))))
	}
	if next <= s.window {
		return 0
	}
	s.flushAt = max(1, s.flushAt*next/s.window)
	if deferSlots {
		s.deferred += next - s.window
	} else {
		s.free += next - s.window
		signal(s.slotFreed)
	}
	s.window = next
	return next
}

// followWindow tells a WindowFollower receiver the grown window.
func (s *subscription) followWindow(window int) {
	f, ok := s.r.(WindowFollower)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(s.broker, s.parent.opts.BrokerTimeout)
	defer cancel()
	if err := f.WindowGrew(ctx, window); err != nil && s.ctx.Err() == nil {
		s.log.Warn("relay: the broker did not take the grown window", "window", window, "err", err)
	}
}
