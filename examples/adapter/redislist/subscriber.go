package redislist

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// subDriver is the driver.SubscribeDriver (and ProvisionDriver, LagDriver)
// of this adapter.
type subDriver struct {
	rc *redis.Client
	c  Config
}

// NewSubscriber connects to the server of c and returns a relay.Subscriber
// for c.Group built by driver.NewSubscriber. ctx bounds the connection check.
func NewSubscriber(ctx context.Context, c Config) (*driver.Subscriber, error) {
	if c.Group == "" {
		return nil, errors.New("relay/redislist: a subscriber needs a group (group= in the URL)")
	}
	rc := redis.NewClient(c.Redis)
	if err := rc.Ping(ctx).Err(); err != nil {
		_ = rc.Close()
		return nil, fmt.Errorf("relay/redislist: cannot reach Redis at %s: %w; check the host and port of the URL", c.Redis.Addr, err)
	}
	d := &subDriver{rc: rc, c: c}
	return driver.NewSubscriber(d, driver.Options{
		InFlight:      c.InFlight,
		InFlightBytes: c.InFlightBytes,
		ExtendEvery:   c.Lease / 3, // keeps the owner key alive while the window is full
	}), nil
}

func (d *subDriver) Capabilities() relay.Capabilities { return capabilities() }

// Provision implements driver.ProvisionDriver: it registers the group, so
// that messages published from now on are kept for it.
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	k := keys{d.c.Prefix, topic}
	if err := d.rc.SAdd(ctx, k.groups(), d.c.Group).Err(); err != nil {
		return fmt.Errorf("relay/redislist: registering group %q of %q: %w", d.c.Group, topic, err)
	}
	return nil
}

// Lag implements driver.LagDriver: the messages in the group's list plus
// those its consumers hold unacknowledged.
func (d *subDriver) Lag(ctx context.Context, topic string) (int64, error) {
	if err := validateTopic(topic); err != nil {
		return 0, err
	}
	k := keys{d.c.Prefix, topic}
	n, err := lagScript.Run(ctx, d.rc, []string{k.consumers(d.c.Group)}, k.base(d.c.Group), k.list(d.c.Group)).Int64()
	if err != nil {
		return 0, fmt.Errorf("relay/redislist: lag of group %q of %q: %w", d.c.Group, topic, err)
	}
	return n, nil
}

// Subscribe implements driver.SubscribeDriver: it registers the group,
// hands the processing lists of dead consumers of the group back to it,
// and starts a receiver with a fresh consumer ID.
func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	if err := d.Provision(ctx, topic); err != nil {
		return nil, err
	}
	k := keys{d.c.Prefix, topic}
	g := d.c.Group
	r := &receiver{
		rc: d.rc, block: d.c.Block, lease: d.c.Lease, id: relay.NewID(),
		list: k.list(g), base: k.base(g), consumers: k.consumers(g),
	}
	r.processing = k.processing(g, r.id)
	r.owner = k.owner(g, r.id)
	// Owner key first: a concurrent reclaim must not take this consumer for dead.
	if err := d.rc.Set(ctx, r.owner, "1", d.c.Lease).Err(); err != nil {
		return nil, fmt.Errorf("relay/redislist: subscribing to %q: %w", topic, err)
	}
	if err := reclaimScript.Run(ctx, d.rc, []string{r.consumers}, r.base, r.list, "", "1").Err(); err != nil {
		_ = d.rc.Del(context.Background(), r.owner).Err()
		return nil, fmt.Errorf("relay/redislist: reclaiming the messages of dead consumers of %q: %w", topic, err)
	}
	return r, nil
}

// Close implements driver.SubscribeDriver.
func (d *subDriver) Close() error { return d.rc.Close() }

// handle is what the driver package keeps per received message.
type handle struct {
	raw string // the element, as it sits in the processing list
	seq uint64 // receive order, so that a release keeps it
}

// receiver is one subscription: one consumer of one group.
type receiver struct {
	rc                    *redis.Client
	block, lease          time.Duration
	id                    string
	list, base, consumers string
	processing, owner     string
	seq                   atomic.Uint64
	waitConn              *redis.Conn // the connection BLMOVE blocks on; see wait
}

// Receive implements driver.Receiver: a script takes up to max elements
// at once; when the list is empty, BLMOVE waits up to block for one.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		raws, err := r.take(ctx, max)
		if err != nil || len(raws) > 0 {
			return r.received(raws), err
		}
		v, err := r.wait(ctx)
		switch {
		case errors.Is(err, redis.Nil):
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			continue
		case err != nil:
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, fmt.Errorf("relay/redislist: waiting for messages: %w", err)
		}
		raws = []string{v}
		if max > 1 {
			more, err := r.take(ctx, max-1)
			if err == nil {
				raws = append(raws, more...)
			}
		}
		return r.received(raws), nil
	}
}

// wait blocks in BLMOVE for up to block until the group's list has an
// element, and moves it to the processing list. BLMOVE runs on a
// connection of its own so that when ctx is done, CLIENT UNBLOCK (sent on
// another connection) ends it at once: Receive never blocks past its ctx.
func (r *receiver) wait(ctx context.Context) (string, error) {
	if r.waitConn == nil {
		r.waitConn = r.rc.Conn()
	}
	id, err := r.waitConn.ClientID(ctx).Result()
	if err != nil {
		return "", err
	}
	finished := make(chan struct{})
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(unblocked)
		r.unblock(id, finished)
	})
	v, err := r.waitConn.BLMove(ctx, r.list, r.processing, "LEFT", "RIGHT", r.block).Result()
	close(finished)
	if !stop() {
		<-unblocked
	}
	return v, err
}

// unblock sends CLIENT UNBLOCK for the waiting connection id until it
// lands (the BLMOVE may not have reached the server yet) or the wait
// finished.
func (r *receiver) unblock(id int64, finished <-chan struct{}) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n, err := r.rc.ClientUnblock(ctx, id).Result()
		cancel()
		if n == 1 || err != nil {
			return
		}
		select {
		case <-finished:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (r *receiver) take(ctx context.Context, max int) ([]string, error) {
	raws, err := receiveScript.Run(ctx, r.rc, []string{r.list, r.processing, r.owner, r.consumers},
		max, r.lease.Milliseconds(), r.id).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("relay/redislist: receiving: %w", err)
	}
	return raws, nil
}

func (r *receiver) received(raws []string) []driver.Received {
	out := make([]driver.Received, 0, len(raws))
	for _, raw := range raws {
		m, attempt, err := decode([]byte(raw))
		if err != nil {
			m = poison([]byte(raw), err)
		}
		out = append(out, driver.Received{Msg: m, Attempt: attempt, Handle: handle{raw: raw, seq: r.seq.Add(1)}})
	}
	return out
}

// Settle implements driver.Receiver: one script applies the batch in order.
func (r *receiver) Settle(ctx context.Context, batch []driver.Settle) error {
	args := make([]any, 0, 2*len(batch))
	for _, s := range batch {
		op := "n"
		if s.Ack {
			op = "a"
		}
		args = append(args, op, s.Handle.(handle).raw)
	}
	if err := settleScript.Run(ctx, r.rc, []string{r.processing, r.list}, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("relay/redislist: settling %d messages: %w", len(batch), err)
	}
	return nil
}

// Release implements driver.Receiver: a nack of each handle, the newest
// first, so that the oldest ends up at the head of the group's list.
func (r *receiver) Release(ctx context.Context, handles []any) error {
	hs := make([]handle, len(handles))
	for i, h := range handles {
		hs[i] = h.(handle)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].seq > hs[j].seq })
	batch := make([]driver.Settle, len(hs))
	for i, h := range hs {
		batch[i] = driver.Settle{Handle: h}
	}
	return r.Settle(ctx, batch)
}

// Extend implements driver.Extender: it keeps the owner key alive while
// the subscription holds messages and does not call Receive.
func (r *receiver) Extend(ctx context.Context, _ []any) error {
	if err := r.rc.Set(ctx, r.owner, "1", r.lease).Err(); err != nil {
		return fmt.Errorf("relay/redislist: refreshing the owner key: %w", err)
	}
	return nil
}

// Close implements driver.Receiver: whatever is left in the processing
// list (an element BLMOVE moved while its reply was lost to a cancelled
// ctx) goes back to the group's list unchanged, the list and the owner key
// are deleted, and the consumer leaves the group's consumer set.
func (r *receiver) Close(ctx context.Context) error {
	if r.waitConn != nil {
		_ = r.waitConn.Close()
	}
	if err := reclaimScript.Run(ctx, r.rc, []string{r.consumers}, r.base, r.list, r.id, "0").Err(); err != nil {
		return fmt.Errorf("relay/redislist: closing consumer %s (a later subscriber reclaims its messages once its owner key expires): %w", r.id, err)
	}
	return nil
}
