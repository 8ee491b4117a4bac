package redisstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/backoff"
	"github.com/go-relay/relay/internal/bytesview"
)

// scanDone is the XAUTOCLAIM cursor of a complete pass over the PEL.
const scanDone = "0-0"

// handle is the settlement token of one delivered entry.
type handle struct {
	id      string
	settled bool // guarded by receiver.smu
}

// MarshalBinary returns the entry ID's bytes without a copy, for go-redis
// to write and not keep: given as a command argument, a *handle is sent
// as its entry ID. Settle builds its XACK this way, because a pointer in
// an interface needs no allocation where a string does.
func (h *handle) MarshalBinary() ([]byte, error) {
	return bytesview.Bytes(h.id), nil
}

// receiver is one subscription: one consumer of the group on one stream.
//
// Receive makes one read step at a time on behalf of the shared layer,
// which keeps the in-flight window, calls Receive from one goroutine and
// retries failed steps with backoff. Settle, Extend and Release are
// serialized by smu, so that a lease extension never takes back an entry
// that a concurrent Nack has just handed back.
type receiver struct {
	c        *redis.Client // shared pool: claims, settlements, CLIENT UNBLOCK
	rc       *redis.Client // one dedicated connection for blocking reads
	key      string
	group    string
	consumer string
	cfg      *SubscriberConfig
	log      *slog.Logger
	freeName func()
	stopWake func() bool

	// stopMover lets go of the stream's mover of delayed messages; set by
	// Subscribe.
	stopMover func(context.Context)

	// Read state, owned by Receive (called from one goroutine).
	reply       bytes.Buffer // the raw reply of the latest read step (see read)
	arena       driver.Arena // copies of what delivered messages keep of replies
	failing     bool         // the last step failed
	recovering  bool         // reading this consumer's own PEL left by an earlier incarnation
	ownCursor   string       // last ID of the own-PEL read
	claimCursor string       // XAUTOCLAIM cursor; scanDone between passes
	nextClaim   time.Time
	nextCleanup time.Time
	claimNow    atomic.Bool // a Nack handed entries back: claim at once

	// dues are the times, in order, at which entries this subscription
	// handed back with a delay (NackAfter) become claimable; Receive
	// claims at each of them. Guarded by dmu.
	dmu  sync.Mutex
	dues []time.Time

	smu sync.Mutex

	clientID      atomic.Int64 // CLIENT ID of rc's connection
	unblockDenied atomic.Bool
	wmu           sync.Mutex
	reading       bool // a blocking XREADGROUP is in progress
	wantWake      bool
	waking        bool
	closed        bool
	wakers        sync.WaitGroup
}

// stuckRead is how long a blocking read may go on after the
// subscription's ctx ended before its connection is closed to end it (a
// server that answers neither the read nor CLIENT UNBLOCK).
const stuckRead = time.Second

func newReceiver(ctx context.Context, d *subDriver, key, consumer string, freeName func()) *receiver {
	r := &receiver{
		c:           d.c,
		key:         key,
		group:       d.cfg.Group,
		consumer:    consumer,
		cfg:         &d.cfg,
		log:         d.cfg.Logger.With("backend", "redis", "stream", key, "group", d.cfg.Group, "consumer", consumer),
		freeName:    freeName,
		recovering:  true,
		ownCursor:   "0",
		claimCursor: scanDone,
	}
	opts := *d.c.Options()
	opts.PoolSize, opts.MinIdleConns, opts.MaxIdleConns, opts.MaxActiveConns = 1, 0, 1, 1
	if opts.ReadTimeout > 0 {
		// The blocking read goes through DoRawWriteTo, which cannot extend the
		// read deadline per command as go-redis's XReadGroup does (by
		// Block plus 10s); this connection only makes that read.
		opts.ReadTimeout = max(opts.ReadTimeout, d.cfg.Block+10*time.Second)
	}
	userHook := opts.OnConnect
	opts.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if id, err := cn.ClientID(ctx).Result(); err == nil {
			r.clientID.Store(id)
		}
		if userHook != nil {
			return userHook(ctx, cn)
		}
		return nil
	}
	r.rc = redis.NewClient(&opts)
	r.stopWake = context.AfterFunc(ctx, r.ended)
	return r
}

// ended interrupts a blocking read when the subscription's ctx ends, so
// that Receive returns: CLIENT UNBLOCK first, and closing the read's
// connection when the read still goes on after stuckRead. Entries the
// server delivered meanwhile stay pending for this consumer; Close hands
// them back.
func (r *receiver) ended() {
	r.wake()
	r.wmu.Lock()
	reading := r.reading
	r.wmu.Unlock()
	if !reading {
		return
	}
	time.AfterFunc(stuckRead, func() {
		r.wmu.Lock()
		stuck := r.reading && !r.closed
		r.wmu.Unlock()
		if stuck {
			_ = r.rc.Close()
		}
	})
}

// Receive makes read steps (see fetch) until one returns entries or fails,
// or ctx is done. After a failed call, the first step that works returns
// (nil, nil) even without entries, so that the shared layer sees that
// reading works again.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		got, err := r.fetch(ctx, max)
		if err != nil {
			r.failing = true
			return nil, err
		}
		if len(got) > 0 || r.failing {
			r.failing = false
			return got, nil
		}
	}
}

// fetch makes one read step for up to max entries: first this consumer's
// own pending entries left by an earlier incarnation, then entries handed
// back or idle longer than ClaimIdle (every ClaimEvery, or at once after a
// Nack), then new entries, waiting up to Block for them. It returns no
// entries and no error when the step found nothing.
func (r *receiver) fetch(ctx context.Context, max int) ([]driver.Received, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var got []driver.Received
	var err error
	switch {
	case r.recovering:
		got, err = r.readOwn(ctx, max)
	case r.claimCursor != scanDone || r.claimNow.Load() || !time.Now().Before(r.nextClaim) || r.popDue(time.Now()):
		got, err = r.claim(ctx, max)
	default:
		got, err = r.readNew(ctx, max)
	}
	if len(got) > 0 || err == nil {
		return got, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if !noGroup(err) {
		return nil, err
	}
	// The stream or the group vanished, typically because Redis restarted
	// without persistence. Start again from the oldest entry so that
	// nothing published since is skipped.
	r.log.Warn("relay: redis consumer group is gone (server restarted without persistence?); recreating it", "err", err)
	r.claimCursor = scanDone
	return nil, ensureGroup(ctx, r.c, r.key, r.group, StartOldest)
}

// readOwn reads this consumer's PEL (entries delivered to an earlier
// subscription of the same name that were never settled).
func (r *receiver) readOwn(ctx context.Context, max int) ([]driver.Received, error) {
	raw, err := r.read(ctx, r.c, "xreadgroup", "group", r.group, r.consumer, "count", max, "streams", r.key, r.ownCursor)
	if err != nil {
		return nil, err
	}
	msgs, err := parseStreams(raw, &r.arena)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		r.recovering = false
		return nil, nil
	}
	r.ownCursor = msgs[len(msgs)-1].id
	return r.withAttempts(ctx, msgs)
}

// read sends a command of a read step and returns its raw reply, which
// stays valid until the next read: the reply is streamed into r.reply, a
// buffer the receiver keeps, instead of DoRaw's new slice grown by
// doubling for every reply, a cost paid on every read step. The parsers copy what they keep out of the reply. Unlike
// DoRaw, go-redis does not retry such a command; the shared layer retries
// the failed Receive.
func (r *receiver) read(ctx context.Context, c *redis.Client, args ...any) ([]byte, error) {
	if r.reply.Cap() > maxKeptReply {
		r.reply = bytes.Buffer{} // a step of large entries: do not hold its memory while idle
	} else {
		r.reply.Reset()
	}
	if _, err := c.DoRawWriteTo(ctx, &r.reply, args...).Result(); err != nil {
		return nil, err
	}
	return r.reply.Bytes(), nil
}

// maxKeptReply is the largest reply buffer a receiver keeps between read
// steps; the replies of small entries (a window of them is tens of KiB)
// reuse it, a larger one is let go after use.
const maxKeptReply = 1 << 20

// readNew waits up to Block (less when a claim pass is due) for new
// entries. wake interrupts the wait.
func (r *receiver) readNew(ctx context.Context, max int) ([]driver.Received, error) {
	block := min(r.cfg.Block, time.Until(r.nextClaim))
	if due, ok := r.firstDue(); ok {
		block = min(block, time.Until(due))
	}
	if block < time.Millisecond {
		block = time.Millisecond
	}
	r.wmu.Lock()
	if r.wantWake {
		r.wantWake = false
		r.wmu.Unlock()
		return nil, nil
	}
	r.reading = true
	r.wmu.Unlock()
	raw, err := r.read(ctx, r.rc, "xreadgroup", "group", r.group, r.consumer, "count", max, "block", block.Milliseconds(), "streams", r.key, ">")
	r.wmu.Lock()
	r.reading, r.wantWake = false, false
	r.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	msgs, err := parseStreams(raw, &r.arena)
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	out := make([]driver.Received, len(msgs))
	hs := make([]handle, len(msgs)) // one allocation for the batch's handles
	for i, m := range msgs {
		if m.msg == nil { // not sent for new entries; never deliver a nil message
			m.msg = &relay.Message{ID: m.id, Payload: []byte{}}
		}
		hs[i].id = m.id
		out[i] = driver.Received{Msg: m.msg, Attempt: 1, Handle: &hs[i], Position: relay.EntryPosition(m.id)}
	}
	return out, nil
}

// wake interrupts a blocking read (on ctx end or after a Nack), using
// CLIENT UNBLOCK on the reader's connection. It never blocks.
func (r *receiver) wake() {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.wantWake = true
	if !r.reading || r.waking || r.closed || r.unblockDenied.Load() {
		return
	}
	r.waking = true
	r.wakers.Add(1)
	go r.unblock()
}

// unblock sends CLIENT UNBLOCK until the read returns: the command is a
// no-op when it reaches the server before the read does, so it repeats,
// every few milliseconds for up to unblockFor.
func (r *receiver) unblock() {
	defer r.wakers.Done()
	defer func() {
		r.wmu.Lock()
		r.waking = false
		r.wmu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), unblockFor)
	defer cancel()
	bo := backoff.Backoff{Initial: 5 * time.Millisecond, Max: 5 * time.Millisecond}
	_ = bo.Retry(ctx, func() error {
		r.wmu.Lock()
		busy := r.reading && r.wantWake
		r.wmu.Unlock()
		if !busy {
			return nil
		}
		n, err := r.c.ClientUnblock(ctx, r.clientID.Load()).Result()
		if err != nil {
			if strings.HasPrefix(err.Error(), "NOPERM") || strings.Contains(err.Error(), "unknown") {
				r.unblockDenied.Store(true)
				r.log.Info("relay: CLIENT UNBLOCK is not permitted; Close and Nack wait up to block= for a read to end", "err", err)
			}
			return err
		}
		if n == 1 {
			return nil
		}
		return errReadNotBlocked
	}, func(err error) bool { return err == errReadNotBlocked })
}

// unblockFor bounds how long unblock keeps trying.
const unblockFor = time.Second

// errReadNotBlocked: CLIENT UNBLOCK reached the server before the read.
var errReadNotBlocked = errors.New("the read is not blocked yet")

// Extend resets the idle time of the entries still held, so that other
// consumers' XAUTOCLAIM does not take them.
func (r *receiver) Extend(ctx context.Context, handles []any) error {
	r.smu.Lock()
	defer r.smu.Unlock()
	ids := make([]string, 0, len(handles))
	for _, h := range handles {
		if h := h.(*handle); !h.settled {
			ids = append(ids, h.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	err := r.c.XClaimJustID(ctx, &redis.XClaimArgs{Stream: r.key, Group: r.group, Consumer: r.consumer, Messages: ids}).Err()
	if err != nil && !noGroup(err) {
		return fmt.Errorf("relay/redis: extending leases: %w", err)
	}
	return nil
}

// Release hands unsettled entries back to the group at once.
func (r *receiver) Release(ctx context.Context, handles []any) error {
	r.smu.Lock()
	defer r.smu.Unlock()
	ids := make([]string, 0, len(handles))
	for _, h := range handles {
		if h := h.(*handle); !h.settled {
			h.settled = true
			ids = append(ids, h.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var back redis.Cmder
	_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		back = r.handback(ctx, p, ids)
		return nil
	})
	if err := back.Err(); err != nil && !noGroup(err) {
		return fmt.Errorf("relay/redis: releasing: %w", err)
	}
	return nil
}

// Close hands back whatever is still pending for this consumer (entries
// read as the subscription ended, settlements that never reached Redis)
// and deletes the consumer, so that the group's consumer list does not
// grow with every subscription. The subscription's ctx is done and
// Receive has returned when it is called.
func (r *receiver) Close(ctx context.Context) error {
	if r.stopMover != nil {
		r.stopMover(ctx)
	}
	r.stopWake()
	r.wmu.Lock()
	r.closed = true
	r.wmu.Unlock()
	r.wakers.Wait()
	err := r.rc.Close()
	if errors.Is(err, redis.ErrClosed) {
		err = nil
	}
	defer r.freeName()

	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pend, perr := r.c.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: r.key, Group: r.group, Start: "-", End: "+", Count: 10000, Consumer: r.consumer,
	}).Result()
	if perr != nil {
		if !noGroup(perr) {
			r.log.Debug("relay: redis consumer cleanup skipped", "err", perr)
		}
		return err
	}
	if len(pend) > 0 {
		ids := make([]string, len(pend))
		for i, p := range pend {
			ids[i] = p.ID
		}
		var back redis.Cmder
		_, _ = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			back = r.handback(ctx, p, ids)
			return nil
		})
		if back.Err() != nil {
			r.log.Debug("relay: redis consumer cleanup: hand-back failed", "err", back.Err())
			return err
		}
		if len(pend) == 10000 {
			return err // more left; keep the consumer
		}
	}
	if derr := r.c.XGroupDelConsumer(ctx, r.key, r.group, r.consumer).Err(); derr != nil && !noGroup(derr) {
		r.log.Debug("relay: deleting redis consumer", "err", derr)
	}
	return err
}
