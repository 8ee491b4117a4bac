package redisstream

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// claim runs one XAUTOCLAIM step of the pass over the group's PEL.
func (r *receiver) claim(ctx context.Context, max int) ([]driver.Received, error) {
	if r.claimCursor == scanDone {
		r.claimNow.Store(false) // this pass sees every hand-back made so far
		r.popDue(time.Now())    // and every delayed one that is due
	}
	raw, err := r.read(ctx, r.c, "xautoclaim", r.key, r.group, r.consumer, r.cfg.ClaimIdle.Milliseconds(), r.claimCursor, "count", max)
	var next string
	var msgs []streamEntry
	if err == nil {
		next, msgs, err = parseAutoClaim(raw, &r.arena)
	}
	if err != nil {
		r.claimCursor = scanDone
		r.nextClaim = time.Now().Add(r.cfg.ClaimEvery)
		return nil, err
	}
	if next == "" {
		next = scanDone
	}
	r.claimCursor = next
	if next == scanDone {
		r.nextClaim = time.Now().Add(r.cfg.ClaimEvery)
		r.cleanupConsumers(ctx)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	return r.withAttempts(ctx, msgs)
}

// dropIdleConsumers deletes, in one atomic step, the consumers of group
// KEYS[1]/ARGV[1] that hold no pending entry and have been idle for at
// least ARGV[2] ms, except ARGV[3] (the caller) and the hand-back
// consumer. It returns their names.
var dropIdleConsumers = redis.NewScript(`
local dropped = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['pending'] == 0 and f['idle'] >= tonumber(ARGV[2]) and f['name'] ~= ARGV[3] and f['name'] ~= ARGV[4] then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    table.insert(dropped, f['name'])
  end
end
return dropped
`)

// cleanupConsumers removes consumers idle for ConsumerTTL without pending
// entries (left by crashed processes), at most every ConsumerTTL/2 and
// every 10 minutes.
func (r *receiver) cleanupConsumers(ctx context.Context) {
	ttl := r.cfg.ConsumerTTL
	if ttl <= 0 || time.Now().Before(r.nextCleanup) {
		return
	}
	r.nextCleanup = time.Now().Add(min(ttl/2, 10*time.Minute))
	dropped, err := dropIdleConsumers.Run(ctx, r.c, []string{r.key}, r.group, ttl.Milliseconds(), r.consumer, HandbackConsumer).StringSlice()
	if err != nil {
		if ctx.Err() == nil {
			r.log.Debug("relay: removing idle redis consumers", "err", err)
		}
		return
	}
	if len(dropped) > 0 {
		r.log.Info("relay: removed idle redis consumers without pending entries", "consumers", dropped, "idle_for", ttl)
	}
}

// withAttempts turns claimed or re-read entries into deliveries, with the
// delivery counter of the PEL as Attempt. Entries deleted from the stream
// while pending (trimmed) are acknowledged and skipped.
func (r *receiver) withAttempts(ctx context.Context, msgs []streamEntry) ([]driver.Received, error) {
	var gone []string
	live := msgs[:0:0]
	for _, m := range msgs {
		if m.msg == nil {
			gone = append(gone, m.id)
			continue
		}
		live = append(live, m)
	}
	cmds := make([]*redis.XPendingExtCmd, len(live))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if len(gone) > 0 {
			p.XAck(ctx, r.key, r.group, gone...)
		}
		for i, m := range live {
			cmds[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: r.key, Group: r.group, Start: m.id, End: m.id, Count: 1})
		}
		return nil
	})
	if len(gone) > 0 {
		r.log.Warn("relay: pending redis entries were deleted from the stream (trimmed?) before they were acknowledged; dropped", "count", len(gone))
	}
	if err != nil && ctx.Err() == nil {
		r.log.Debug("relay: reading redis delivery counts", "err", err)
	}
	out := make([]driver.Received, len(live))
	hs := make([]handle, len(live))
	for i, m := range live {
		attempt := 2 // delivered before, at least once
		if cmds[i] != nil {
			if p, err := cmds[i].Result(); err == nil && len(p) == 1 && p[0].RetryCount > 0 {
				attempt = int(p[0].RetryCount)
			}
		}
		hs[i].id = m.id
		out[i] = driver.Received{Msg: m.msg, Attempt: attempt, Handle: &hs[i], Position: relay.EntryPosition(m.id)}
	}
	return out, nil
}
