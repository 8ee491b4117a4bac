package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// NewSubscriber returns a subscriber for cfg.Group that reads through
// client. The client stays the caller's: Close does not close it. ctx
// bounds the initial server check, which fails when the server is older
// than Redis 6.2 (no XAUTOCLAIM). The subscriber is safe for concurrent use
// and implements relay.Provisioner.
func NewSubscriber(ctx context.Context, client *redis.Client, cfg SubscriberConfig) (relay.Subscriber, error) {
	return newSubscriber(ctx, client, cfg, false)
}

func newSubscriber(ctx context.Context, client *redis.Client, cfg SubscriberConfig, own bool) (relay.Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	if err := checkServer(ctx, client, version{6, 2}, "XAUTOCLAIM (taking over the pending entries of crashed consumers)"); err != nil {
		return nil, err
	}
	caps := capabilities(DefaultMaxBytes)
	caps.MaxDelay = maxDelay(cfg.ClaimIdle) // longer NackAfter delays are emulated by the shared layer
	d := &subDriver{c: client, cfg: cfg, own: own, caps: caps,
		movers: newMovers(client, cfg.DelayPoll, cfg.Logger.With("backend", "redis"))}
	window, maxWindow := driver.AdaptiveWindow(cfg.InFlight, DefaultInFlight)
	return driver.NewSubscriber(d, driver.Options{
		InFlight:      window,
		MaxInFlight:   maxWindow,
		InFlightBytes: cfg.InFlightBytes,
		ExtendEvery:   cfg.ClaimIdle / 3,
		Logger:        cfg.Logger,
		Group:         cfg.Group,
	}), nil
}

type subDriver struct {
	c    *redis.Client
	cfg  SubscriberConfig
	own  bool
	caps relay.Capabilities
	// movers move the due delayed messages of the subscribed streams.
	movers *driver.Mover
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

// Provision creates the stream and the group (at Start) if they do not
// exist. Idempotent; an existing group is not moved.
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	return ensureGroup(ctx, d.c, d.cfg.Prefix+topic, d.cfg.Group, d.cfg.Start)
}

// Subscribe reads topic's stream as a consumer of the group and, while the
// subscription runs, moves the topic's due delayed messages into the
// stream (one mover per stream per subscriber, see DelayedSuffix).
func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	key := d.cfg.Prefix + topic
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := ensureGroup(cctx, d.c, key, d.cfg.Group, d.cfg.Start)
	cancel()
	if err != nil {
		return nil, err
	}
	stopMover, err := d.movers.Acquire(key)
	if err != nil {
		return nil, err
	}
	name, release := acquireConsumer(key, d.cfg.Group, d.cfg.Consumer)
	r := newReceiver(ctx, d, key, name, release)
	r.stopMover = stopMover
	return r, nil
}

// Close closes the client when the subscriber opened it from a URL.
func (d *subDriver) Close() error {
	if d.own {
		return d.c.Close()
	}
	return nil
}

// consumers are the consumer names taken by live subscriptions of this
// process, keyed by stream, group and name.
var consumers struct {
	sync.Mutex
	used map[string]bool
}

// acquireConsumer returns the first free name of base, base-2, base-3, ...
// for (key, group) and a func that frees it.
func acquireConsumer(key, group, base string) (string, func()) {
	consumers.Lock()
	defer consumers.Unlock()
	if consumers.used == nil {
		consumers.used = map[string]bool{}
	}
	for n := 1; ; n++ {
		name := base
		if n > 1 {
			name = base + "-" + strconv.Itoa(n)
		}
		k := key + "\x00" + group + "\x00" + name
		if consumers.used[k] {
			continue
		}
		consumers.used[k] = true
		return name, func() {
			consumers.Lock()
			delete(consumers.used, k)
			consumers.Unlock()
		}
	}
}

// RemoveTopic deletes the topic's stream (every group and entry of it).
// Idempotent.
func (d *subDriver) RemoveTopic(ctx context.Context, topic string) error {
	if err := d.c.Del(ctx, d.cfg.Prefix+topic).Err(); err != nil {
		return fmt.Errorf("relay/redis: deleting stream %q: %w", d.cfg.Prefix+topic, err)
	}
	return nil
}
