package bridge

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-relay/relay"
)

// The cutover signal (docs/migration.md). A route is caught up when it
// has seen, at every check for CaughtUpAfter, its source report lag 0 and
// nothing in flight. Every adapter of this module counts in its lag the
// messages its group has taken and not acknowledged yet (delivered, being
// forwarded, or acked and not yet flushed to the broker), and the route
// acks a message only once the destination confirmed its copy, so lag 0
// also means that everything forwarded was confirmed; in flight covers
// at-most-once routes, which ack before they publish.

// cutover is a route's caught-up state. Its methods are safe for
// concurrent use.
type cutover struct {
	since   atomic.Int64           // unix nanoseconds the route is caught up since; 0: not
	unknown atomic.Pointer[string] // why the route cannot report caught-up; nil: it can
	drained atomic.Bool            // stopped by StopWhen
	stop    context.CancelFunc     // ends the route's run (StopWhen); set by run
	lastMu  sync.Mutex             // guards last
	last    lastForward            // the latest message confirmed by the destination
}

// lastForward is the latest message the destination confirmed.
type lastForward struct {
	id  string
	pos relay.Position
	at  time.Time
}

// forwarded records m as the latest message the destination confirmed.
// It takes a lock the status reads, never allocates, and is called once
// per published batch (per message on routes that publish alone).
func (c *cutover) forwarded(m *relay.Message) {
	pos := m.Position()
	now := time.Now()
	c.lastMu.Lock()
	c.last = lastForward{id: m.ID, pos: pos, at: now}
	c.lastMu.Unlock()
}

func (c *cutover) lastForwarded() lastForward {
	c.lastMu.Lock()
	defer c.lastMu.Unlock()
	return c.last
}

// caughtUpSince returns when the route became caught up, or false.
func (c *cutover) caughtUpSince() (time.Time, bool) {
	ns := c.since.Load()
	if ns == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// pollEvery is how often the route asks its source for its lag: a quarter
// of CaughtUpAfter, between 100ms and 5s.
func (r *route) pollEvery() time.Duration {
	return min(r.pollInterval, max(100*time.Millisecond, r.cfg.CaughtUpAfter/4))
}

// poll refreshes the lag gauge (and the source lag of Status) and the
// caught-up state until ctx is done, and stops the route once caught up
// when StopWhen says so. A source that does not report lag
// (relay.LagReporter, or ErrNotSupported) is not asked again: its lag is
// unknown and the route cannot be caught up (Status says why); other
// errors leave the last value and count as not caught up.
func (r *route) poll(ctx context.Context, sub relay.Subscriber) {
	defer func() { // a new session starts over
		r.cut.since.Store(0)
		r.m.caughtUp.Set(0)
	}()
	lr, ok := sub.(relay.LagReporter)
	if !ok {
		r.cannotCatchUp("the source does not report its lag (relay.LagReporter)")
		return
	}
	every := r.pollEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	busy := time.Now() // the latest check that saw work left
	for {
		lctx, cancel := context.WithTimeout(ctx, max(every, time.Second))
		n, err := lr.Lag(lctx, r.cfg.From.Topic)
		cancel()
		now := time.Now()
		switch {
		case err == nil:
			r.lag.Store(n)
			r.lagKnown.Store(true)
			r.m.lag.Set(float64(n))
		case errors.Is(err, relay.ErrNotSupported):
			r.lagKnown.Store(false)
			r.cannotCatchUp("the source cannot tell its lag: " + err.Error())
			return
		default:
			r.log.Debug("source lag unknown", "err", err)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil || n != 0 || count(r.m.inFlight) != 0 {
			busy = now
			if r.cut.since.Swap(0) != 0 {
				r.m.caughtUp.Set(0)
				r.log.Info("route no longer caught up", "source_lag", n, "in_flight", count(r.m.inFlight))
			}
		} else if now.Sub(busy) >= r.cfg.CaughtUpAfter && r.cut.since.Load() == 0 {
			r.cut.since.Store(now.UnixNano())
			r.m.caughtUp.Set(1)
			r.log.Info("route caught up", append([]any{"quiet_for", now.Sub(busy).Round(time.Millisecond)}, r.countAttrs()...)...)
		}
		if r.cfg.StopWhen == StopWhenDrained && r.cut.since.Load() != 0 && r.cut.drained.CompareAndSwap(false, true) {
			r.log.Info("route drained its source: stopping (stop_when: drained)")
			r.cut.stop()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// cannotCatchUp records why the route can never report caught-up, once.
func (r *route) cannotCatchUp(why string) {
	if r.cut.unknown.Swap(&why) == nil {
		r.log.Warn("route cannot report caught-up", "why", why)
		if r.cfg.StopWhen == StopWhenDrained {
			r.log.Error("stop_when: drained cannot stop this route: its source does not say when it is empty", "why", why)
		}
	}
}

// countAttrs are the route's counts as log attributes.
func (r *route) countAttrs() []any {
	return []any{
		"forwarded", count(r.m.forwarded),
		"failed", count(r.m.failed),
		"poisoned", count(r.m.poisoned),
		"duplicates", count(r.m.duplicates),
		"looped", count(r.m.looped),
		"retries", count(r.m.retries),
	}
}

// finalCounts are the log attributes of the line that ends a route's
// run: its counts and, for the last message the destination confirmed,
// its ID and source position.
func (r *route) finalCounts() []any {
	a := r.countAttrs()
	if l := r.cut.lastForwarded(); l.id != "" {
		a = append(a, "last_id", l.id)
		if !l.pos.IsZero() {
			a = append(a, "last_source_position", l.pos.String())
		}
	}
	return a
}

// incomplete returns an error when the route left messages behind: some
// were poisoned, or lost on an at-most-once route (failed). On an
// at-least-once route a failed delivery is redelivered, so a drained
// source means it was forwarded after all.
func (r *route) incomplete() error {
	poisoned, failed := count(r.m.poisoned), count(r.m.failed)
	switch {
	case poisoned > 0:
		return &IncompleteError{Route: r.cfg.Name, Poisoned: poisoned, Failed: failed}
	case failed > 0 && r.cfg.Guarantee == relay.AtMostOnce:
		return &IncompleteError{Route: r.cfg.Name, Poisoned: poisoned, Failed: failed}
	}
	return nil
}
