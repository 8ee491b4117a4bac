package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// eoHandle is a delivered record's handle: the transaction it belongs to.
type eoHandle struct{ gen uint64 }

// eoReceiver runs the transaction loop on the subscription's receive
// goroutine: poll, Begin, deliver, wait until every record is settled,
// End (commit or abort), poll again. Only Receive and Close touch the
// session's Begin, End and poll, so they never run concurrently.
type eoReceiver struct {
	p     *eoPair
	topic string
	arena *driver.Arena // nil with share_payloads=true (see decodeInto)

	scope string // brokers and group, for the package's attempt memo

	left  bool          // left the group after a fence
	batch []*kgo.Record // the polled records of the open transaction
	tries []int32       // tries[i] is the attempt batch[i] was delivered as
	next  int           // batch[next:] are not delivered yet
	gen   uint64        // transaction number, for the handles

	mu      sync.Mutex
	open    int  // delivered and unsettled records of the transaction
	abort   bool // a record was nacked or released
	settled chan struct{}
}

// endTimeout bounds ending a transaction (flush, offsets, EndTxn); kgo
// advises not to cancel End, so the subscription's ctx does not.
const endTimeout = 30 * time.Second

func (r *eoReceiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		if err := r.fencedErr(ctx); err != nil {
			return nil, err
		}
		if r.next < len(r.batch) {
			return r.deliver(max), nil
		}
		if r.batch != nil {
			if err := r.waitSettled(ctx); err != nil {
				return nil, err
			}
			if err := r.end(ctx); err != nil {
				return nil, err
			}
		}
		if err := r.poll(ctx, max); err != nil {
			return nil, err
		}
	}
}

// deliver hands out up to max records of the batch.
func (r *eoReceiver) deliver(max int) []driver.Received {
	k := min(max, len(r.batch)-r.next)
	out := make([]driver.Received, k)
	msgs := make([]relay.Message, k)
	h := &eoHandle{gen: r.gen}
	for i := range k {
		rec := r.batch[r.next+i]
		attempt := attempts.Take(attemptKey{r.scope, r.topic, rec.Partition, rec.Offset}) + 1
		r.tries = append(r.tries, int32(attempt))
		decodeInto(&msgs[i], rec, r.arena)
		out[i] = driver.Received{Msg: &msgs[i], Attempt: attempt, Handle: h, Position: relay.PartitionPosition(rec.Partition, rec.Offset)}
	}
	r.next += k
	r.mu.Lock()
	r.open += k
	r.mu.Unlock()
	return out
}

// waitSettled waits until every delivered record is settled.
func (r *eoReceiver) waitSettled(ctx context.Context) error {
	for {
		r.mu.Lock()
		open := r.open
		r.mu.Unlock()
		if open == 0 {
			return nil
		}
		select {
		case <-r.settled:
		case <-r.p.fenced:
			return r.fencedErr(ctx)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fencedErr returns nil while the pair is not fenced. Once it is, it
// leaves the group (so that the other members take its partitions at once,
// not after the session timeout) the first time, and returns the fencing
// error as relay.ErrClosed: the subscription ends, and the records of the
// open transaction are delivered again to whoever owns their partitions
// (the transaction is aborted: by the coordinator, which already did, or
// by the new epoch of a new pair).
func (r *eoReceiver) fencedErr(ctx context.Context) error {
	select {
	case <-r.p.fenced:
	default:
		return nil
	}
	if !r.left {
		r.left = true
		rememberTries(r.scope, r.topic, r.batch, r.tries)
		r.tries = r.tries[:0] // remembered once: Close ends the transaction without writing them again
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), brokerTimeout)
		if err := r.p.sess.Client().LeaveGroupContext(lctx); err != nil && !isCtxErr(err) {
			r.p.log.Warn("relay/kafka: leaving the group after the fence", "err", err)
		}
		cancel()
	}
	r.p.mu.Lock()
	err := r.p.failed
	r.p.mu.Unlock()
	return fmt.Errorf("%w: %w", relay.ErrClosed, err)
}

// end commits or aborts the open transaction. An error ends the
// subscription: kgo's End errors are not retryable.
func (r *eoReceiver) end(ctx context.Context) error {
	r.mu.Lock()
	commit := !r.abort
	r.mu.Unlock()
	batch, tries := r.batch, r.tries
	r.batch, r.tries, r.next = nil, r.tries[:0], 0
	if !commit {
		// Before End: once it aborts, the records may go to another
		// pair of the process at once.
		rememberTries(r.scope, r.topic, batch, tries)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	var committed bool
	err := r.p.tp.end(func() error {
		var err error
		committed, err = r.p.sess.End(ectx, kgo.TransactionEndTry(commit))
		return r.p.tp.txError("end transaction", err, r.p.tp.endAge)
	})
	if commit && !committed { // aborted by a rebalance, or failed
		rememberTries(r.scope, r.topic, batch, tries)
	}
	if errors.Is(err, relay.ErrFenced) {
		return r.fencedErr(ctx) // fenced by txError
	}
	if err != nil {
		r.p.fail(err)
		r.p.log.Error("relay/kafka: exactly-once transaction failed; the subscription ends, its records will be redelivered",
			"topic", r.topic, "records", len(batch), "err", err)
		return fmt.Errorf("%w: %w", relay.ErrClosed, err)
	}
	if !committed && commit {
		r.p.log.Info("relay/kafka: exactly-once transaction aborted by a rebalance; its records are redelivered",
			"topic", r.topic, "records", len(batch))
	}
	return nil
}

// poll waits for records and begins their transaction.
func (r *eoReceiver) poll(ctx context.Context, n int) error {
	pctx, cancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a fence met by a publish ends the wait for records
		select {
		case <-r.p.fenced:
			cancel()
		case <-stop:
		}
	}()
	fs := r.p.sess.PollRecords(pctx, max(r.p.cfg.InFlight, n))
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := r.fencedErr(ctx); err != nil {
		return err
	}
	if fs.IsClientClosed() {
		return fmt.Errorf("relay/kafka: %w", relay.ErrClosed)
	}
	fs.EachError(func(topic string, part int32, err error) {
		if !errors.Is(err, context.Canceled) {
			r.p.log.Warn("relay/kafka: fetch failed; retrying", "topic", topic, "partition", part, "err", err)
		}
	})
	recs := fs.Records()
	if len(recs) == 0 {
		return nil
	}
	if err := r.p.tp.begin(r.p.sess.Begin); err != nil {
		if errors.Is(err, relay.ErrFenced) {
			return r.fencedErr(ctx)
		}
		r.p.fail(err)
		return fmt.Errorf("%w: %w", relay.ErrClosed, err)
	}
	r.gen++
	r.mu.Lock()
	r.open, r.abort = 0, false
	r.mu.Unlock()
	r.batch, r.tries, r.next = recs, r.tries[:0], 0
	return nil
}

// rememberTries remembers the attempts of the delivered records of an
// uncommitted transaction (tries[i] is batch[i]'s), so that their next
// delivery in this process, to this subscription or a later one of the
// group, counts on from them: Kafka counts no deliveries. The memo is the
// package's bounded one that plain subscriptions share.
func rememberTries(scope, topic string, batch []*kgo.Record, tries []int32) {
	for i, n := range tries {
		attempts.Remember(attemptKey{scope, topic, batch[i].Partition, batch[i].Offset}, int(n))
	}
}

// Settle counts the settlements of the open transaction; a nack marks it
// for abort.
func (r *eoReceiver) Settle(_ context.Context, batch []driver.Settle) error {
	r.mu.Lock()
	for _, s := range batch {
		h, ok := s.Handle.(*eoHandle)
		if !ok || h.gen != r.gen {
			continue
		}
		r.open--
		if !s.Ack {
			r.abort = true
		}
	}
	r.mu.Unlock()
	select {
	case r.settled <- struct{}{}:
	default:
	}
	return nil
}

// Release marks the open transaction for abort; Close aborts it.
func (r *eoReceiver) Release(_ context.Context, handles []any) error {
	if len(handles) > 0 {
		r.mu.Lock()
		r.abort = true
		r.mu.Unlock()
	}
	return nil
}

// Close ends the open transaction, if any: it commits when every record
// of it was delivered and acked (a drained router's last messages), and
// aborts otherwise (its records go back to the group: the consumer
// rewinds to the committed offsets). Then it stops consuming the topic.
func (r *eoReceiver) Close(ctx context.Context) error {
	var err error
	if r.batch != nil {
		r.mu.Lock()
		commit := r.next == len(r.batch) && r.open == 0 && !r.abort
		r.mu.Unlock()
		if !commit {
			rememberTries(r.scope, r.topic, r.batch, r.tries) // before End, as in end
		}
		committed := false
		err = r.p.tp.end(func() error {
			var err error
			committed, err = r.p.sess.End(ctx, kgo.TransactionEndTry(commit))
			return r.p.tp.txError("end the transaction at the end of the subscription", err, r.p.tp.endAge)
		})
		if commit && !committed {
			rememberTries(r.scope, r.topic, r.batch, r.tries)
		}
		r.batch, r.tries = nil, nil
		if errors.Is(err, relay.ErrFenced) {
			err = nil // the coordinator or a newer epoch aborts it; reported by fence
		}
	}
	r.p.sess.Client().PurgeTopicsFromConsuming(r.topic)
	r.p.mu.Lock()
	r.p.active = false
	r.p.mu.Unlock()
	return err
}
