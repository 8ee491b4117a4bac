package redisstream

import (
	"cmp"
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
	"github.com/go-relay/relay/internal/backoff"
)

// readShare: one read asks for at most 1/readShare of the byte window.
const readShare = 8

// scanDone is the XAUTOCLAIM cursor of a complete pass over the PEL.
const scanDone = "0-0"

// handle is the settlement token of one delivered entry.
type handle struct {
	id      string
	settled bool // guarded by receiver.smu
	// slot: the entry counts against the reader's window (outstanding);
	// cleared by whichever of settling, releasing or parking comes first.
	slot atomic.Bool
	size int64 // driver.EncodedSize of the message, set by the reader
}

// receiver is one subscription: one consumer of the group on one stream.
//
// A reader goroutine owns the read state and reads ahead into buf while
// the shared layer delivers the previous batch, so that network round
// trips overlap with handling. It keeps the entries this consumer holds
// (read ahead, delivered, not yet settled) within the in-flight window,
// in count and in bytes (InFlightBytes), and reads again once a quarter of
// the window is free. Settle, Extend and
// Release are serialized by smu, so that a lease extension never takes
// back an entry that a concurrent Nack has just handed back.
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
	stopMover func()

	window   int
	lowWater int
	// maxBytes bounds the bytes of the entries counted in outstanding
	// (InFlightBytes; <= 0: no byte bound); sizeGuess is the largest
	// entry size of recent reads, for sizing the next one (reader only).
	maxBytes  int64
	sizeGuess int64

	// Read-ahead state, guarded by bmu.
	bmu         sync.Mutex
	buf         []driver.Received
	outstanding int   // entries read and not yet settled or released
	outBytes    int64 // their bytes
	readErr     error // to be returned by the next Receive
	healed      bool  // reading works again after readErr
	avail       chan struct{}
	freed       chan struct{}
	readerDone  chan struct{}

	// Read state, owned by the reader goroutine.
	recovering  bool   // reading this consumer's own PEL left by an earlier incarnation
	ownCursor   string // last ID of the own-PEL read
	claimCursor string // XAUTOCLAIM cursor; scanDone between passes
	nextClaim   time.Time
	nextCleanup time.Time
	claimNow    atomic.Bool // a Nack handed entries back: claim at once

	// dues are the times, in order, at which entries this subscription
	// handed back with a delay (NackAfter) become claimable; the reader
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
		window:      d.cfg.InFlight,
		lowWater:    max(1, d.cfg.InFlight/4),
		maxBytes:    cmp.Or(d.cfg.InFlightBytes, driver.DefaultInFlightBytes),
		avail:       make(chan struct{}, 1),
		freed:       make(chan struct{}, 1),
		readerDone:  make(chan struct{}),
	}
	opts := *d.c.Options()
	opts.PoolSize, opts.MinIdleConns, opts.MaxIdleConns, opts.MaxActiveConns = 1, 0, 1, 1
	if opts.ReadTimeout > 0 {
		// The blocking read goes through DoRaw, which cannot extend the
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
	r.stopWake = context.AfterFunc(ctx, r.wake)
	go r.readLoop(ctx)
	return r
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Receive returns up to max entries that the reader has read ahead,
// waiting until there are some or ctx is done. When reading starts to
// fail it returns the error once (after the entries already read), and
// (nil, nil) once reading works again.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		r.bmu.Lock()
		if n := min(max, len(r.buf)); n > 0 {
			out := make([]driver.Received, n)
			copy(out, r.buf)
			r.buf = append(r.buf[:0], r.buf[n:]...)
			r.bmu.Unlock()
			return out, nil
		}
		if err := r.readErr; err != nil {
			r.readErr = nil
			r.bmu.Unlock()
			return nil, err
		}
		if r.healed {
			r.healed = false
			r.bmu.Unlock()
			return nil, nil
		}
		r.bmu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.avail:
		}
	}
}

// readLoop reads while the window has room, until ctx is done.
func (r *receiver) readLoop(ctx context.Context) {
	defer close(r.readerDone)
	bo := backoff.Backoff{Max: time.Second} // a local reconnect is cheap; go-redis retries dials too
	failing := false
	for {
		r.bmu.Lock()
		free := r.window - r.outstanding
		freeBytes, held := r.maxBytes-r.outBytes, r.outstanding > 0
		r.bmu.Unlock()
		if free < r.lowWater || r.maxBytes > 0 && held && freeBytes < r.maxBytes/4 {
			select {
			case <-ctx.Done():
				return
			case <-r.freed:
				continue
			}
		}
		if r.maxBytes > 0 {
			// As many entries of the recent size as fit in the bytes free,
			// and in an eighth of the byte window: go-redis grows the raw
			// reply by appending to it, so a read briefly takes two to
			// three times its size, which must stay small beside the
			// window. One entry (whatever its size) when no size is known
			// yet, as the shared layer asks.
			fit := int64(1)
			if r.sizeGuess > 0 {
				fit = max(1, min(freeBytes, r.maxBytes/readShare)/r.sizeGuess)
			}
			free = int(min(int64(free), fit))
		}
		got, err := r.fetch(ctx, free)
		var gotBytes, largest int64
		for _, rc := range got {
			h := rc.Handle.(*handle)
			h.size = int64(driver.EncodedSize(rc.Msg))
			gotBytes += h.size
			largest = max(largest, h.size)
		}
		if len(got) > 0 {
			r.sizeGuess = max(largest, r.sizeGuess-r.sizeGuess/8)
		}
		if ctx.Err() != nil && len(got) == 0 {
			return // entries read as ctx ended stay pending; Close hands them back
		}
		r.bmu.Lock()
		switch {
		case err != nil && !failing:
			// Only the first error of a streak goes to the shared layer
			// (which logs it and reports it through Health); retrying is
			// done here, so that two backoffs do not add up.
			r.readErr, r.healed, failing = err, false, true
		case err != nil:
			r.log.Debug("relay: redis read still failing", "err", err, "attempt", bo.Attempts()+1)
		case failing:
			r.readErr, r.healed, failing = nil, true, false
			r.log.Info("relay: redis reads work again")
		}
		if len(got) > 0 {
			r.outstanding += len(got)
			r.outBytes += gotBytes
			r.buf = append(r.buf, got...)
		}
		r.bmu.Unlock()
		signal(r.avail)
		if err != nil {
			if !bo.Sleep(ctx) {
				return
			}
			continue
		}
		bo.Reset()
	}
}

// settled returns n entries of size bytes to the window.
func (r *receiver) settled(n int, size int64) {
	if n == 0 {
		return
	}
	r.bmu.Lock()
	r.outstanding -= n
	r.outBytes -= size
	r.bmu.Unlock()
	signal(r.freed)
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
	raw, err := r.c.DoRaw(ctx, "xreadgroup", "group", r.group, r.consumer, "count", max, "streams", r.key, r.ownCursor).Result()
	if err != nil {
		return nil, err
	}
	msgs, err := parseStreams(raw)
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
	raw, err := r.rc.DoRaw(ctx, "xreadgroup", "group", r.group, r.consumer, "count", max, "block", block.Milliseconds(), "streams", r.key, ">").Result()
	r.wmu.Lock()
	r.reading, r.wantWake = false, false
	r.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	msgs, err := parseStreams(raw)
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	out := make([]driver.Received, len(msgs))
	hs := make([]handle, len(msgs)) // one allocation for the batch's handles
	for i, m := range msgs {
		if m.msg == nil { // not sent for new entries; never deliver a nil message
			m.msg = &relay.Message{ID: m.id}
		}
		hs[i].id = m.id
		hs[i].slot.Store(true)
		out[i] = driver.Received{Msg: m.msg, Attempt: 1, Handle: &hs[i]}
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
// no-op when it reaches the server before the read does, so it repeats.
func (r *receiver) unblock() {
	defer r.wakers.Done()
	defer func() {
		r.wmu.Lock()
		r.waking = false
		r.wmu.Unlock()
	}()
	for range 200 {
		r.wmu.Lock()
		busy := r.reading && r.wantWake
		r.wmu.Unlock()
		if !busy {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n, err := r.c.ClientUnblock(ctx, r.clientID.Load()).Result()
		cancel()
		if err != nil {
			if strings.HasPrefix(err.Error(), "NOPERM") || strings.Contains(err.Error(), "unknown") {
				r.unblockDenied.Store(true)
				r.log.Info("relay: CLIENT UNBLOCK is not permitted; Close and Nack wait up to block= for a read to end", "err", err)
			}
			return
		}
		if n == 1 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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
	r.bmu.Lock()
	for _, rc := range r.buf { // read ahead, not yet taken by the shared layer
		ids = append(ids, rc.Handle.(*handle).id)
	}
	r.bmu.Unlock()
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
	freed, freedBytes := 0, int64(0)
	for _, h := range handles {
		if h := h.(*handle); !h.settled {
			h.settled = true
			ids = append(ids, h.id)
			if h.slot.CompareAndSwap(true, false) {
				freed++
				freedBytes += h.size
			}
		}
	}
	r.settled(freed, freedBytes)
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

// Close stops the reader, hands back whatever is still pending for this
// consumer (entries read ahead, settlements that never reached Redis) and
// deletes the consumer, so that the group's consumer list does not grow
// with every subscription. The subscription's ctx is done when it is called.
func (r *receiver) Close(ctx context.Context) error {
	if r.stopMover != nil {
		r.stopMover()
	}
	select {
	case <-r.readerDone:
	case <-ctx.Done():
		// A read the server never answers (a hung broker): closing the
		// reader's connection ends it; the Close below then only reports
		// that it is closed already.
		_ = r.rc.Close()
		<-r.readerDone
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
