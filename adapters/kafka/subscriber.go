package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/backoff"
)

// brokerTimeout bounds the admin calls of Subscribe and every commit.
const brokerTimeout = 10 * time.Second

// NewSubscriber connects a subscriber for cfg.Group. ctx bounds connecting
// only: the seed brokers must answer within it. The result also implements
// relay.Provisioner, relay.CapabilityReporter and relay.HealthChecker. Safe
// for concurrent use.
func NewSubscriber(ctx context.Context, cfg SubscriberConfig) (relay.Subscriber, error) {
	cfg.defaults()
	if err := join(cfg.problems()); err != nil {
		return nil, fmt.Errorf("%w: %w", relay.ErrBadURL, err)
	}
	opts, err := cfg.clientOpts()
	if err != nil {
		return nil, err
	}
	h := newHealth()
	opts = append(opts, kgo.WithHooks(h))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("relay/kafka: %w", err)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("relay/kafka: connecting to %v: %w", cfg.Brokers, err)
	}
	adm := kadm.NewClient(cl)
	d := &subDriver{
		cfg:    cfg,
		opts:   opts,
		admCl:  cl,
		adm:    adm,
		topics: newTopicMaker(adm, &cfg.Config),
		caps:   capabilities(DefaultMaxMessageBytes),
		scope:  attemptScope(&cfg),
		health: h,
	}
	d.movers = newMovers(d)
	window, maxWindow := driver.AdaptiveWindow(cfg.InFlight, DefaultInFlight)
	d.maxWindow = maxWindow
	// SettleBatch: the whole window (the driver scales it as the window
	// grows), so that a fast handler's acks become one offset commit per
	// window, as a PollRecords + commit loop makes.
	return driver.NewSubscriber(d, driver.Options{InFlight: window, MaxInFlight: maxWindow, InFlightBytes: cfg.InFlightBytes,
		SettleBatch: window, CommitInterval: cfg.CommitInterval, Logger: cfg.Logger, BrokerTimeout: brokerTimeout, Group: cfg.Group}), nil
}

type subDriver struct {
	cfg    SubscriberConfig
	opts   []kgo.Opt
	admCl  *kgo.Client
	adm    *kadm.Client
	topics *topicMaker
	caps   relay.Capabilities
	scope  string // identifies brokers and group for the attempt memory
	// maxWindow is the largest a subscription's window grows: cfg.InFlight
	// when set, driver.DefaultMaxInFlight for an adaptive window. The
	// read-ahead and poll sizes follow it.
	maxWindow int
	health    *health // shared by the admin client and every member's client

	gmu     sync.Mutex
	members []*member // group members of this subscriber; see Subscribe

	movers *driver.Mover // of delayed messages, one per subscribed topic
}

// startMover creates topic's delay bucket topics (unless
// create_topics=false) and starts its mover of delayed messages, or takes
// a reference on the running one. The returned func lets go of it.
func (d *subDriver) startMover(ctx context.Context, topic string) (func(context.Context), error) {
	if !d.cfg.NoCreateTopics {
		names := DelayTopics(topic)
		errs := make([]error, len(names))
		var wg sync.WaitGroup
		for i, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = d.topics.ensure(ctx, name)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	return d.movers.Acquire(topic)
}

// Health implements relay.HealthChecker: nil while some broker answers the
// subscriber's clients.
func (d *subDriver) Health() error { return d.health.err() }

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

func (d *subDriver) Close() error {
	d.admCl.Close()
	return nil
}

func (d *subDriver) ensureTopic(ctx context.Context, topic string) error {
	if d.cfg.NoCreateTopics {
		return d.topics.mustExist(ctx, topic)
	}
	return d.topics.ensure(ctx, topic)
}

// Provision creates topic (unless create_topics=false) and, for a group
// that has no committed offset on it, commits the start position (the
// oldest retained offsets for start=earliest, the end offsets for
// start=latest), so the group exists and keeps every message published
// from now on. Idempotent.
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	if err := d.ensureTopic(ctx, topic); err != nil {
		return err
	}
	return d.ensureGroupStart(ctx, topic)
}

// ensureGroupStart commits the configured start position for a group with
// no commit on topic. A group without members takes it through the admin
// API; a group of which this subscriber is a member takes it through that
// member (Kafka refuses an admin commit while the group has members). In a
// group whose only members are other subscribers, those position it; with
// some commits, partitions lacking one start at the oldest record, so
// nothing published to them is skipped. A commit refused because the group
// is rebalancing or gained a member meanwhile is tried again, until ctx
// ends.
func (d *subDriver) ensureGroupStart(ctx context.Context, topic string) error {
	bo := backoff.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	return bo.Retry(ctx, func() error { return d.tryGroupStart(ctx, topic) },
		func(err error) bool { return errors.Is(err, errGroupMoved) })
}

// errGroupMoved marks a start-position commit refused because the group's
// membership changed under it; ensureGroupStart tries again.
var errGroupMoved = errors.New("the group's membership changed")

func (d *subDriver) tryGroupStart(ctx context.Context, topic string) error {
	group := d.cfg.Group
	fetched, err := d.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		fetched, err = nil, nil // some brokers say so for a group with no state
	}
	if err != nil {
		return fmt.Errorf("relay/kafka: reading offsets of group %q: %w", group, err)
	}
	committed := false
	fetched.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			committed = true
		}
	})
	if committed {
		return nil
	}
	described, err := d.adm.DescribeGroups(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		described, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("relay/kafka: describing group %q: %w", group, err)
	}
	var via *member
	if g, ok := described[group]; ok && g.Err == nil && len(g.Members) > 0 {
		if via = d.joinedMember(); via == nil {
			return nil
		}
	}
	listed, err := d.listStart(ctx, topic)
	if err != nil {
		return fmt.Errorf("relay/kafka: listing offsets of %q: %w", topic, err)
	}
	if via != nil {
		err = via.commitStart(ctx, topic, listed)
		if errors.Is(err, kgo.ErrClientClosed) {
			// The member left meanwhile (its last subscription ended):
			// the next try finds the group without it.
			err = fmt.Errorf("%w: %w", errGroupMoved, err)
		}
	} else {
		offsets := make(kadm.Offsets)
		listed.Each(func(l kadm.ListedOffset) {
			offsets.Add(kadm.Offset{Topic: l.Topic, Partition: l.Partition, At: l.Offset, LeaderEpoch: -1})
		})
		var resp kadm.OffsetResponses
		resp, err = d.adm.CommitOffsets(ctx, group, offsets)
		if err == nil {
			err = resp.Error()
		}
	}
	if movedErr(err) {
		return fmt.Errorf("relay/kafka: committing the start position of group %q on %q: %w: %w", group, topic, errGroupMoved, err)
	}
	if err != nil {
		return fmt.Errorf("relay/kafka: committing the start position of group %q on %q: %w", group, topic, err)
	}
	return nil
}

// movedErr reports whether a commit was refused because of the group's
// membership or a rebalance, which a later try can get past.
func movedErr(err error) bool {
	return errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) ||
		errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.FencedInstanceID) ||
		errors.Is(err, kerr.StaleMemberEpoch) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorNotAvailable)
}

// joinedMember returns a member of this subscriber that has joined the
// group, or nil.
func (d *subDriver) joinedMember() *member {
	d.gmu.Lock()
	defer d.gmu.Unlock()
	for _, m := range d.members {
		if m.joined() {
			return m
		}
	}
	return nil
}

// listStart lists the start position of every partition of topic. A topic
// created a moment ago may not be known to every broker yet: retriable
// errors are retried until ctx ends.
func (d *subDriver) listStart(ctx context.Context, topic string) (kadm.ListedOffsets, error) {
	bo := backoff.Backoff{Initial: 20 * time.Millisecond, Max: time.Second}
	var listed kadm.ListedOffsets
	err := bo.Retry(ctx, func() error {
		var err error
		if d.cfg.Start == StartLatest {
			listed, err = d.adm.ListEndOffsets(ctx, topic)
		} else {
			listed, err = d.adm.ListStartOffsets(ctx, topic)
		}
		if err == nil {
			err = listed.Error()
		}
		return err
	}, kerr.IsRetriable)
	return listed, err
}

// Subscribe consumes topic for the group. The subscriber's subscriptions
// share one group member (one kgo client) as long as their topics differ:
// the topic is added to the member's subscription, which rebalances the
// member without disturbing the other topics' subscriptions. A second
// concurrent subscription of a topic the member already consumes joins as
// another member (competing with the first, as separate subscribers
// would). The topic is created if missing (unless create_topics=false);
// with start=latest a group new to the topic has its position fixed
// first, so nothing published after Subscribe returns is skipped.
func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, 3*brokerTimeout)
	defer cancel()
	if err := d.ensureTopic(actx, topic); err != nil {
		return nil, err
	}
	if d.cfg.Start == StartLatest {
		if err := d.ensureGroupStart(actx, topic); err != nil {
			return nil, err
		}
	}
	stopMover, err := d.startMover(actx, topic)
	if err != nil {
		return nil, err
	}
	r := newReceiver(d, topic)
	r.stopMover = stopMover
	d.gmu.Lock()
	defer d.gmu.Unlock()
	for _, m := range d.members {
		if m.receiver(topic) == nil {
			m.add(r)
			return r, nil
		}
	}
	m, err := newMember(d, r)
	if err != nil {
		stopMover(context.Background())
		return nil, err
	}
	d.members = append(d.members, m)
	return r, nil
}

// release takes r's topic out of its member, and closes the member
// (leaving the group) when r was its last subscription.
func (d *subDriver) release(ctx context.Context, r *receiver) {
	d.gmu.Lock()
	m := r.m
	last := m.remove(r)
	if last {
		d.members = slices.DeleteFunc(d.members, func(x *member) bool { return x == m })
	}
	d.gmu.Unlock()
	if last {
		m.close(ctx)
	}
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// RemoveTopic deletes topic from the cluster (every group's records of it;
// Kafka drops the groups' offsets of a deleted topic). Idempotent.
func (d *subDriver) RemoveTopic(ctx context.Context, topic string) error {
	return d.topics.remove(ctx, topic)
}
