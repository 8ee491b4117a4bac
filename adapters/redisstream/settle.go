package redisstream

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay/driver"
)

// Settle sends the acks (one XACK) and hands the nacked entries back to
// the group, in one round trip. A nack with a delay is handed back with an
// idle time that makes it claimable once the delay has passed (see
// handbackAfter); this subscription claims at that time.
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	r.smu.Lock()
	defer r.smu.Unlock()
	// The XACK's arguments: the handles themselves stand for their entry
	// IDs (see handle.MarshalBinary), so a batch of acks costs one
	// allocation, not one boxed string per entry.
	xack := make([]any, 3, 3+len(batch))
	xack[0], xack[1], xack[2] = "xack", r.key, r.group
	var nacks []string
	var delayed map[int64][]string // by delay in ms
	for _, s := range batch {
		h := s.Handle.(*handle)
		h.settled = true
		switch {
		case s.Ack:
			xack = append(xack, h)
		case s.Delay > 0:
			if delayed == nil {
				delayed = map[int64][]string{}
			}
			ms := delayMillis(s.Delay)
			delayed[ms] = append(delayed[ms], h.id)
		default:
			nacks = append(nacks, h.id)
		}
	}
	var ack redis.Cmder
	cmds := make([]redis.Cmder, 0, 1+len(delayed))
	if len(nacks) == 0 && len(delayed) == 0 {
		ack = redis.NewIntCmd(ctx, xack...)
		_ = r.c.Process(ctx, ack)
	} else {
		_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if len(xack) > 3 {
				ack = redis.NewIntCmd(ctx, xack...)
				_ = p.Process(ctx, ack)
			}
			if len(nacks) > 0 {
				cmds = append(cmds, r.handback(ctx, p, nacks))
			}
			for ms, ids := range delayed {
				cmds = append(cmds, r.handbackAfter(ctx, p, ids, ms))
			}
			return nil
		})
	}
	if len(delayed) > 0 {
		now := time.Now()
		for ms := range delayed {
			// dueSlack covers the rounding of Redis's millisecond clock.
			r.addDue(now.Add(time.Duration(ms)*time.Millisecond + dueSlack))
		}
	}
	if len(nacks) > 0 {
		r.claimNow.Store(true)
	}
	if len(nacks) > 0 || len(delayed) > 0 {
		r.wake() // claim now, or recompute how long to block
	}
	for _, c := range append(cmds, ack) {
		if c != nil && c.Err() != nil && !noGroup(c.Err()) {
			return fmt.Errorf("relay/redis: settling: %w", c.Err())
		}
	}
	return nil
}

// dueSlack is how long after a delayed entry should have become claimable
// the subscription claims it.
const dueSlack = 5 * time.Millisecond

// delayMillis is d in whole milliseconds, rounded up, so that the delay
// Redis applies is never shorter than d.
func delayMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// maxDelay is the longest NackAfter delay handed to Redis: an entry whose
// idle time is 0 becomes claimable after ClaimIdle, and Redis does not
// accept a delivery time in the future (XCLAIM TIME is capped at now).
func maxDelay(claimIdle time.Duration) time.Duration {
	return claimIdle.Truncate(time.Millisecond)
}

// handback queues XCLAIM of ids to HandbackConsumer with the oldest
// possible delivery time, so that the next XAUTOCLAIM of any consumer takes
// them. JUSTID leaves the delivery counter as it is; the claim that
// redelivers the entry increments it.
func (r *receiver) handback(ctx context.Context, p redis.Pipeliner, ids []string) redis.Cmder {
	return r.handbackIdle(ctx, p, ids, "time", 1)
}

// handbackAfter queues XCLAIM of ids to HandbackConsumer with an idle
// time of ClaimIdle minus delayMs, so that XAUTOCLAIM (whose minimum idle
// time is ClaimIdle) takes them only once delayMs has passed, measured by
// the server's clock: the delay holds when this subscription or process
// ends, and no consumer holds the entries meanwhile.
func (r *receiver) handbackAfter(ctx context.Context, p redis.Pipeliner, ids []string, delayMs int64) redis.Cmder {
	return r.handbackIdle(ctx, p, ids, "idle", max(0, r.cfg.ClaimIdle.Milliseconds()-delayMs))
}

func (r *receiver) handbackIdle(ctx context.Context, p redis.Pipeliner, ids []string, opt string, v int64) redis.Cmder {
	args := make([]any, 0, 9+len(ids))
	args = append(args, "xclaim", r.key, r.group, HandbackConsumer, 0)
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, opt, v, "justid")
	return p.Do(ctx, args...)
}

// addDue records that this subscription should claim at t.
func (r *receiver) addDue(t time.Time) {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	i, _ := slices.BinarySearchFunc(r.dues, t, time.Time.Compare)
	r.dues = slices.Insert(r.dues, i, t)
}

// firstDue returns the earliest recorded claim time.
func (r *receiver) firstDue() (time.Time, bool) {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	if len(r.dues) == 0 {
		return time.Time{}, false
	}
	return r.dues[0], true
}

// popDue drops the claim times up to now and reports whether there were any.
func (r *receiver) popDue(now time.Time) bool {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	n := 0
	for n < len(r.dues) && !r.dues[n].After(now) {
		n++
	}
	r.dues = r.dues[n:]
	return n > 0
}
