// Package rowqueue is the database-independent half of relay's
// table-backed queues (adapters/postgres, adapters/sqlite): a group's
// messages are rows that a subscription claims under a lease, and a
// message's handle is its row id (int64). Receiver turns a Table, the
// adapter's statements, into a driver.Receiver; Waiters wakes the
// subscriptions of a topic; the text and outbox checks are what both
// databases refuse alike.
package rowqueue

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Capabilities are those of a table queue of backend: durable and shared
// by processes; ordered per topic with one subscription per group;
// NackAfter and DeliverAt native (visible_at), without a maximum;
// attempts counted by the database; publishing to one group; and nothing
// kept for a group created later.
func Capabilities(backend string, maxBytes, maxBatch int, maxBytesSetBy string) relay.Capabilities {
	return relay.Capabilities{
		Backend:              backend,
		Durable:              true,
		CrossProcess:         true,
		Ordering:             relay.OrderPerTopic,
		NativeDelay:          true,
		DelayedDelivery:      relay.DelayNative,
		AttemptFromBroker:    true,
		MaxMessageBytes:      maxBytes,
		MaxMessageBytesSetBy: maxBytesSetBy,
		MaxBatch:             maxBatch,
		PublishToGroup:       true,
		RetainedBeforeGroup: "dropped: publishing makes a delivery row for each group that exists at that moment, " +
			"so a group receives only what is published after Provision or its first Subscribe created it",
	}
}

// Options are the shared layer's options for a table queue's subscriber
// of group: leases extended every third of lease, and a fast handler's acks
// settling the whole window at once (acks go with the next claim, see
// Receiver.Settle, and a claim costs more than acks), so that each claim
// takes a window, not half. inFlight and maxInFlight are the window and
// how far it may grow (driver.AdaptiveWindow).
func Options(group string, inFlight, maxInFlight int, inFlightBytes int64, lease time.Duration, log *slog.Logger) driver.Options {
	return driver.Options{Group: group, InFlight: inFlight, MaxInFlight: maxInFlight, InFlightBytes: inFlightBytes,
		ExtendEvery: lease / 3, SettleBatch: inFlight, Logger: log}
}

// Nack is a nacked row and how long it stays unclaimable.
type Nack struct {
	ID    int64
	Delay time.Duration
}

// Table is one subscription's statements on its group's rows of one
// topic. Each method is one transaction; acks passed to it are row ids
// whose delivery rows it deletes, along with the message rows no group
// needs any more. Deleting a row twice is harmless, so a transaction
// whose outcome was unknown may be sent again.
type Table interface {
	// Claim deletes the rows of acks, then leases up to max claimable
	// rows in message order and returns them.
	Claim(ctx context.Context, max int, acks []int64) ([]driver.Received, error)
	// NextDue is how long until the group's next row becomes claimable
	// (a delay or a lease runs out); ok is false when no row waits.
	NextDue(ctx context.Context) (d time.Duration, ok bool, err error)
	// Settle deletes the rows of acks and makes those of nacks claimable
	// after their delays, waking the group for those due at once.
	Settle(ctx context.Context, acks []int64, nacks []Nack) error
	// Extend renews the leases of ids held by this subscription.
	Extend(ctx context.Context, ids []int64) error
	// Release deletes the rows of acks and makes those of ids claimable
	// at once, waking the group.
	Release(ctx context.Context, acks, ids []int64) error
	// Close deletes the rows of acks (none: no statement) and stops the
	// subscription's wake-ups.
	Close(ctx context.Context, acks []int64) error
}

// Receiver is a driver.Receiver (and driver.Extender) over a Table. It
// keeps acks for the next claim (see Settle), the times at which its own
// delayed nacks fall due, and waits between empty claims for a wake-up,
// the next due row or the poll period.
type Receiver struct {
	t    Table
	wake chan struct{}
	poll time.Duration

	mu sync.Mutex
	// due are the times at which messages this receiver nacked with a
	// delay become claimable, so that it wakes for them without polling.
	due []time.Time
	// acked are the acks Settle took but did not send: the next claim
	// deletes their rows in its own transaction, before it claims (see
	// Settle). Release or Close sends what is left.
	acked []int64
	// waiting is true while Receive waits for a wake-up, which Settle
	// then sends so that new acks do not wait for the poll period.
	waiting bool
}

// NewReceiver returns a receiver claiming through t that waits at most
// poll between empty claims. A signal on wake (see Signal) ends a wait at
// once: the adapter sends one when rows of the topic may have become
// claimable (a publish, a nack, a release).
func NewReceiver(t Table, wake chan struct{}, poll time.Duration) *Receiver {
	return &Receiver{t: t, wake: wake, poll: poll}
}

// Receive claims up to n claimable rows in message order. When there
// are none it asks the table when the group's next row becomes claimable
// and waits for that, a wake-up, the next delay of its own nacks to pass,
// or the poll period, whichever comes first, and claims again.
func (r *Receiver) Receive(ctx context.Context, n int) ([]driver.Received, error) {
	for {
		acks := r.takeAcked()
		if len(acks) == 0 && ctx.Err() != nil {
			return nil, ctx.Err() // no claim starts after the end
		}
		out, err := r.claim(ctx, n, acks)
		if err != nil {
			// Whether the transaction committed is unknown: the acks are
			// sent again, and rows the claim may have leased come back
			// when their lease runs out.
			r.putBack(acks)
			return nil, err
		}
		if len(out) > 0 {
			return out, nil
		}
		next, ok, err := r.t.NextDue(ctx)
		if err != nil {
			return nil, err
		}
		wait := r.poll
		if ok {
			wait = min(wait, max(0, next))
		}
		wait, acked := r.startWait(wait)
		if acked {
			continue // acks came in meanwhile: send them now
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-t.C:
		}
		t.Stop()
		r.mu.Lock()
		r.waiting = false
		r.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// claimGrace is how long a claim in flight may go on after the
// subscription's context ended. A variable for tests only.
var claimGrace = 2 * time.Second

// claim calls the table's Claim under a context that ends claimGrace
// after ctx, not with it: the subscription ends while its receive loop
// waits for a claim, and a claim cut off between its statements leaves
// the database connection mid-transaction (the client library closes it
// in the background, and the server waits to read the rest) with the
// acked rows it deleted still locked; the Close that sends those acks
// again then waits on the locks until its own deadline. Finished, the
// claim's acks are in, and the driver releases the rows it leased.
func (r *Receiver) claim(ctx context.Context, n int, acks []int64) ([]driver.Received, error) {
	grace := claimGrace
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-cctx.Done():
		}
	})()
	return r.t.Claim(cctx, n, acks)
}

// startWait marks the receiver as waiting and returns how long to wait:
// wait, or less when a delayed nack is due sooner. It reports instead
// that acks are waiting to be sent, and then does not mark it.
func (r *Receiver) startWait(wait time.Duration) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.acked) > 0 {
		return 0, true
	}
	r.waiting = true
	now := time.Now()
	r.due = slices.DeleteFunc(r.due, func(t time.Time) bool { return !t.After(now) })
	for _, t := range r.due {
		wait = min(wait, t.Sub(now))
	}
	return wait, false
}

// maxDue bounds the due times a Receiver keeps: beyond them it keeps the
// earliest, and wakes for the later ones by polling.
const maxDue = 1024

// addDueLocked records due times, dropping those past and, beyond maxDue,
// the latest: a receiver that never waits (a steady backlog) must not
// collect one per delayed nack.
func (r *Receiver) addDueLocked(due []time.Time) {
	now := time.Now()
	r.due = slices.DeleteFunc(r.due, func(t time.Time) bool { return !t.After(now) })
	r.due = append(r.due, due...)
	if len(r.due) > maxDue {
		slices.SortFunc(r.due, time.Time.Compare)
		r.due = slices.Clip(r.due[:maxDue/2])
	}
}

// Waiting reports whether Receive waits for a wake-up (for tests).
func (r *Receiver) Waiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting
}

// takeAcked removes and returns the acks not sent yet.
func (r *Receiver) takeAcked() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	acks := r.acked
	r.acked = nil
	return acks
}

// putBack returns acks that could not be sent to the ones waiting.
func (r *Receiver) putBack(acks []int64) {
	if len(acks) == 0 {
		return
	}
	r.mu.Lock()
	r.acked = append(acks, r.acked...)
	r.mu.Unlock()
}

// Settle deletes the acked rows and makes the nacked rows claimable
// again (at once, or after their delay), in one transaction.
//
// A batch of acks only is not sent by itself: Settle keeps it and returns,
// the shared layer frees the window slots, and the claim that follows at
// once deletes the rows in its own transaction before it claims new ones
// (waking Receive if it waits). So the window still bounds the rows
// leased to this subscription, and consuming costs one transaction per
// batch instead of two. Release or Close sends the acks no claim took.
func (r *Receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	if allAcks(batch) {
		r.mu.Lock()
		for _, s := range batch {
			r.acked = append(r.acked, s.Handle.(int64))
		}
		waiting := r.waiting
		r.mu.Unlock()
		if waiting {
			Signal(r.wake)
		}
		return nil
	}
	acks := r.takeAcked()
	var nacks []Nack
	var now bool
	var due []time.Time
	for _, s := range batch {
		id := s.Handle.(int64)
		switch {
		case s.Ack:
			acks = append(acks, id)
		default:
			nacks = append(nacks, Nack{ID: id, Delay: s.Delay})
			if s.Delay <= 0 {
				now = true
			} else {
				due = append(due, time.Now().Add(s.Delay))
			}
		}
	}
	if err := r.t.Settle(ctx, acks, nacks); err != nil {
		r.putBack(acks)
		return err
	}
	if len(due) > 0 {
		r.mu.Lock()
		r.addDueLocked(due)
		r.mu.Unlock()
	}
	if now || len(due) > 0 {
		Signal(r.wake)
	}
	return nil
}

// Extend implements driver.Extender: the held rows' leases run for
// another lease from now.
func (r *Receiver) Extend(ctx context.Context, handles []any) error {
	return r.t.Extend(ctx, ids(handles))
}

// Release sends the acks no claim took and makes the unsettled rows
// claimable at once, in one transaction.
func (r *Receiver) Release(ctx context.Context, handles []any) error {
	acks := r.takeAcked()
	if err := r.t.Release(ctx, acks, ids(handles)); err != nil {
		r.putBack(acks) // Close tries them once more
		return err
	}
	return nil
}

// Close sends the acks no claim or release took (within ctx; when that
// fails their rows are redelivered once their lease runs out) and closes
// the table.
func (r *Receiver) Close(ctx context.Context) error {
	return r.t.Close(ctx, r.takeAcked())
}

func allAcks(batch []driver.Settle) bool {
	for _, s := range batch {
		if !s.Ack {
			return false
		}
	}
	return true
}

func ids(handles []any) []int64 {
	out := make([]int64, len(handles))
	for i, h := range handles {
		out[i] = h.(int64)
	}
	return out
}
