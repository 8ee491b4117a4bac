package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Emulated delayed delivery (Message.DeliverAt).
//
// A delayed message is not XADDed: the publisher ZADDs it to the sorted
// set DelayedSuffix beside the stream, scored by its due time in Unix
// milliseconds rounded up (so that it is never moved early). The member
// is the stream entry itself, framed: see delayedMember. Subscriptions run
// a mover (one per stream per subscriber, a driver.Mover) that moves due members to the
// stream with moveDue, an atomic Lua script that reads the server's clock,
// so a crash of any process never loses or duplicates a move.

// DelayedSuffix is appended to a topic's stream key to name the sorted set
// that holds its delayed messages until they are due.
const DelayedSuffix = ":relay-delayed"

// DefaultDelayPoll is SubscriberConfig.DelayPoll's default.
const DefaultDelayPoll = 100 * time.Millisecond

// maxDelayedMetadata bounds the metadata entries of a delayed message: the
// mover's script passes every field to XADD at once, and Lua unpacks fewer
// than 8000 values.
const maxDelayedMetadata = 3900

// moveBatch is how many due members one run of moveDue moves; a full
// batch makes the mover run again at once.
const moveBatch = 100

// delayedMember returns the sorted-set member of a delayed message: the
// due time in nanoseconds (16 hex digits, so that members of one
// millisecond sort by due time), a random nonce (so that two publishes of
// one message are two members), the trimming the publisher applies to its
// XADDs ("" none, "L<n>" MAXLEN ~ n, "A<ms>" MINID ~ now-ms), then each
// field and value of Encode(m) as "<length>:<bytes>".
func (d *pubDriver) delayedMember(m *relay.Message) string {
	var b strings.Builder
	b.Grow(48 + encodedSize(m) + 8*len(m.Metadata))
	fmt.Fprintf(&b, "%016x%016x|", uint64(m.DeliverAt.UnixNano()), rand.Uint64())
	switch {
	case d.cfg.MaxLen > 0:
		b.WriteString("L" + strconv.FormatInt(d.cfg.MaxLen, 10))
	case d.cfg.MaxAge > 0:
		b.WriteString("A" + strconv.FormatInt(d.cfg.MaxAge.Milliseconds(), 10))
	}
	b.WriteByte('|')
	for _, f := range Encode(m) {
		var s string
		switch v := f.(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		}
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	return b.String()
}

// dueScore is the score of a message due at t: Unix milliseconds rounded
// up, so that the mover (which compares with the server's milliseconds
// rounded down) never moves it before t.
func dueScore(t time.Time) float64 {
	ns := t.UnixNano()
	ms := ns / 1e6
	if ns%1e6 > 0 {
		ms++
	}
	return float64(ms)
}

// moveDue moves up to ARGV[1] members of the sorted set KEYS[1] whose
// score is at most the server's time in ms to the stream KEYS[2], one
// XADD each (trimmed as the member says), removing each member right after
// its XADD. Atomic: a member is either in the set or in the stream. A
// member that cannot be moved (not of relay's making, or refused by XADD)
// stays in the set and the others move on. It
// returns {moved, score of the earliest member left or "", server ms,
// failed, the first failure's error or ""}.
var moveDue = redis.NewScript(`
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local moved, failed, firstErr = 0, 0, ''
local function move(m)
  local b1 = string.find(m, '|', 1, true)
  local b2 = string.find(m, '|', b1 + 1, true)
  local trim = string.sub(m, b1 + 1, b2 - 1)
  local args = {KEYS[2]}
  local kind = string.sub(trim, 1, 1)
  if kind == 'L' then
    args[#args + 1] = 'MAXLEN'; args[#args + 1] = '~'; args[#args + 1] = string.sub(trim, 2)
  elseif kind == 'A' then
    args[#args + 1] = 'MINID'; args[#args + 1] = '~'
    args[#args + 1] = string.format('%d-0', now - tonumber(string.sub(trim, 2)))
  end
  args[#args + 1] = '*'
  local pos, n = b2 + 1, #m
  while pos <= n do
    local c = string.find(m, ':', pos, true)
    local len = tonumber(string.sub(m, pos, c - 1))
    args[#args + 1] = string.sub(m, c + 1, c + len)
    pos = c + len + 1
  end
  redis.call('XADD', unpack(args))
end
for _, m in ipairs(due) do
  local ok, err = pcall(move, m)
  if ok then
    redis.call('ZREM', KEYS[1], m)
    moved = moved + 1
  else
    failed = failed + 1
    if firstErr == '' then firstErr = tostring(err and (err.err or err) or 'error') end
  end
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {moved, nxt[2] or '', now, failed, firstErr}
`)

// newMovers returns the movers of delayed messages for a subscriber: one
// loop per stream key, however many of its subscriptions read that
// stream, each running moveTask.Move.
func newMovers(c *redis.Client, poll time.Duration, log *slog.Logger) *driver.Mover {
	return driver.NewMover(func(key string) (driver.MoveTask, error) {
		return &moveTask{c: c, poll: poll, log: log, keys: []string{key + DelayedSuffix, key}}, nil
	}, log)
}

// moveTask moves the due members of one stream's delayed set into the
// stream.
type moveTask struct {
	c      *redis.Client
	poll   time.Duration
	log    *slog.Logger
	keys   []string  // the delayed set and the stream
	warned time.Time // when members that cannot be moved were last logged
}

// Close implements driver.MoveTask: nothing is left to end.
func (*moveTask) Close(context.Context) {}

// Move implements driver.MoveTask: it runs moveDue once and returns how
// long to wait before the next run: until the earliest member left is due,
// at most poll (so that a member published meanwhile with an earlier due
// time is at most poll late); 0 after a full batch.
func (mt *moveTask) Move(ctx context.Context) (time.Duration, error) {
	keys := mt.keys
	res, err := moveDue.Run(ctx, mt.c, keys, moveBatch).Slice()
	if err != nil {
		return 0, fmt.Errorf("relay/redis: moving due delayed messages of %q: %w", keys[1], err)
	}
	if len(res) != 5 {
		return 0, fmt.Errorf("relay/redis: moving due delayed messages of %q: unexpected reply %v", keys[1], res)
	}
	moved, _ := res[0].(int64)
	now, _ := res[2].(int64)
	failed, _ := res[3].(int64)
	if failed > 0 {
		// They stay in the set, due, and are tried again on every run:
		// say so at most once a minute.
		if time.Since(mt.warned) > time.Minute {
			mt.warned = time.Now()
			mt.log.Warn("relay: redis: due delayed messages cannot be added to their stream; they stay in the delayed set",
				"stream", keys[1], "failed", failed, "err", res[4])
		}
		if moved == 0 {
			return mt.poll, nil
		}
	}
	if moved > 0 && moved+failed >= moveBatch {
		return 0, nil // a full batch: more may be due
	}
	wait := mt.poll
	if s, _ := res[1].(string); s != "" {
		next, err := strconv.ParseFloat(s, 64)
		if err == nil {
			wait = min(wait, time.Duration(int64(next)-now)*time.Millisecond)
		}
	}
	return max(wait, time.Millisecond), nil
}
