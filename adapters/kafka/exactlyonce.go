package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// ExactlyOnceConfig configures an exactly-once pair (NewExactlyOnce).
type ExactlyOnceConfig struct {
	// Subscriber is the consuming side: the group and the consumer
	// settings. Its Config (brokers, TLS, SASL, client ID) is the
	// connection of the pair's one client. Start must be earliest and
	// the isolation read_committed (the defaults).
	Subscriber SubscriberConfig
	// Publisher is the producing side: acks (all), compression, linger,
	// size limit and the TransactionalID (required), taken from here or
	// from Subscriber's URL (see OpenExactlyOnce). Its Brokers, when set,
	// must be the same cluster as Subscriber's: one transaction cannot
	// span two clusters.
	Publisher PublisherConfig
}

func (c *ExactlyOnceConfig) problems() []problem {
	ps := c.Subscriber.problems()
	ps = append(ps, c.Publisher.ownProblems()...)
	ps = append(ps, c.Publisher.txProblems()...)
	if len(c.Publisher.Brokers) > 0 && !sameCluster(c.Subscriber.Brokers, c.Publisher.Brokers) {
		ps = append(ps, problem{"seed", fmt.Sprintf("exactly-once needs the source and the destination on one Kafka "+
			"cluster (one transaction holds the outputs and the source offsets); got source %v and destination %v",
			c.Subscriber.Brokers, c.Publisher.Brokers)})
	}
	if c.Subscriber.Start != StartEarliest {
		ps = append(ps, problem{"start", "an exactly-once pair starts a new group at the oldest record (start=earliest)"})
	}
	if c.Subscriber.ReadUncommitted {
		ps = append(ps, problem{"isolation", "an exactly-once pair reads with isolation=read_committed: records of " +
			"aborted transactions must not become outputs"})
	}
	return ps
}

// sameCluster reports whether two seed lists name the same brokers.
func sameCluster(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// NewExactlyOnce connects an exactly-once pair on one kgo
// GroupTransactSession: a subscriber for cfg.Subscriber.Group and a
// publisher whose Publish produces into the transaction of the messages
// being handled, so that a handler's outputs and its input's offsets
// commit atomically (Kafka's consume-transform-produce). ctx bounds
// connecting and the registration of the transactional ID, which fences
// an older instance of the same ID at once (its open transaction is
// aborted; its next commit fails with ErrFenced).
//
// How it runs: the subscriber polls up to InFlight records, begins a
// transaction and delivers them. The publisher's Publish produces into
// that transaction (outside one it fails with ErrNoTransaction), and
// returns once the records are written (not yet visible). Once every
// record of the poll is settled, the transaction ends: committed with the
// records' offsets when all were acked; aborted when any was nacked
// (Nack, or NackAfter once its delay passed) or the group rebalanced
// meanwhile, and then the consumer rewinds to the last committed offsets
// and every record of the poll is delivered again (acked ones too), with
// Attempt counted in process. A crash leaves the transaction open until
// the next instance with the same transactional ID starts (which aborts
// it) or the broker's transaction timeout. Consumers of the outputs must
// read with isolation=read_committed to see each once.
//
// The pair serves one subscription at a time (one topic); a handler that
// holds a message for long holds the whole transaction (and the group's
// read_committed consumers of the outputs wait for it), bounded by
// TransactionTimeout. Both halves are safe for concurrent use; close both:
// the connection is released when both are closed. The subscriber
// implements relay.ExactlyOnceSubscriber (ExactlyOnceWith is true for the
// pair's publisher), relay.Provisioner, relay.AssignmentReporter (the
// partitions its member holds) and relay.HealthChecker.
//
// Fenced: when a produce, Begin or End meets a fencing error (the
// producer epoch moved: ErrTransactionTimedOut when the open transaction
// was older than TransactionTimeout, as after a pause of the process;
// ErrFenced when another client of the transactional_id took over; both
// match relay.ErrFenced), the pair is done: Health reports the error (also
// after Close), the member leaves the group at once, the subscription ends
// without waiting for the records being handled (their transaction is
// aborted), and every later Publish fails with the same error. Close both
// halves and open a new pair, which gets a new producer epoch and group
// membership.
func NewExactlyOnce(ctx context.Context, cfg ExactlyOnceConfig) (relay.ExactlyOnceSubscriber, relay.Publisher, error) {
	cfg.Subscriber.defaults()
	if cfg.Subscriber.InFlight == 0 {
		cfg.Subscriber.InFlight = DefaultInFlight // one transaction: not adaptive
	}
	pc := cfg.Publisher
	pc.Config = cfg.Subscriber.Config
	cfg.Publisher.defaults()
	pc.defaults()
	if err := join(cfg.problems()); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", relay.ErrBadURL, err)
	}
	sc := cfg.Subscriber
	opts, err := sc.clientOpts()
	if err != nil {
		return nil, nil, err
	}
	h := newHealth()
	opts = append(opts, kgo.WithHooks(h),
		kgo.ConsumerGroup(sc.Group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(sc.SessionTimeout),
		kgo.HeartbeatInterval(sc.HeartbeatInterval),
		kgo.RebalanceTimeout(sc.RebalanceTimeout),
		kgo.FetchMaxWait(sc.FetchMaxWait),
		kgo.FetchMaxBytes(int32(sc.FetchMaxBytes)),
		kgo.FetchMaxPartitionBytes(int32(max(1, sc.FetchMaxBytes/4))),
		kgo.Balancers(sc.balancer()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	p := &eoPair{cfg: sc, log: sc.Logger.With("backend", "kafka", "group", sc.Group, "transactional_id", pc.TransactionalID),
		fenced: make(chan struct{})}
	opts = append(opts, p.assigned.opts(nil, nil)...)
	sess, err := kgo.NewGroupTransactSession(append(opts, pc.txOpts()...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("relay/kafka: %w", err)
	}
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		sess.Close()
		return nil, nil, txError(fmt.Sprintf("registering transactional_id %q with %v", pc.TransactionalID, sc.Brokers), err)
	}
	p.sess = sess
	p.refs.Store(2)
	p.tp = newTxProducer(sess.Client(), &pc, h, fmt.Sprintf("exactly-once publisher %q (publish while handling a message of its subscriber)", pc.TransactionalID))
	p.tp.onFence = p.fence
	p.tp.onClose = p.release
	p.pub = driver.NewPublisher(p.tp, 0)
	d := &eoDriver{p: p, topics: p.tp.topics, health: h}
	p.sub = &eoSubscriber{Subscriber: driver.NewSubscriber(d, driver.Options{InFlight: sc.InFlight, InFlightBytes: sc.InFlightBytes,
		SettleBatch: sc.InFlight, Logger: sc.Logger, BrokerTimeout: brokerTimeout, Group: sc.Group}), p: p}
	return p.sub, p.pub, nil
}

// CheckExactlyOnce implements relay.ExactlyOnceOpener.
func (opener) CheckExactlyOnce(src, dst *url.URL) error {
	_, err := parseExactlyOnce(src, dst)
	return err
}

// OpenExactlyOnce implements relay.ExactlyOnceOpener: src is the
// subscriber's URL (group=, consumer settings, the connection), dst the
// publisher's (producer settings); both must name the same seed brokers.
// transactional_id= may be on either, or on both if equal.
func (opener) OpenExactlyOnce(ctx context.Context, src, dst *url.URL) (relay.ExactlyOnceSubscriber, relay.Publisher, error) {
	cfg, err := parseExactlyOnce(src, dst)
	if err != nil {
		return nil, nil, err
	}
	return NewExactlyOnce(ctx, cfg)
}

func parseExactlyOnce(src, dst *url.URL) (ExactlyOnceConfig, error) {
	spc, sc, serr := parseURL(src, true)
	pc, _, derr := parseURL(dst, false)
	if err := errors.Join(serr, derr); err != nil {
		return ExactlyOnceConfig{}, err
	}
	switch {
	case pc.TransactionalID == "":
		pc.TransactionalID = spc.TransactionalID
	case spc.TransactionalID != "" && spc.TransactionalID != pc.TransactionalID:
		return ExactlyOnceConfig{}, fmt.Errorf("%w: relay/kafka: transactional_id: the source says %q, the destination %q; give one",
			relay.ErrBadURL, spc.TransactionalID, pc.TransactionalID)
	}
	if pc.TransactionTimeout == 0 {
		pc.TransactionTimeout = spc.TransactionTimeout
	}
	cfg := ExactlyOnceConfig{Subscriber: sc, Publisher: pc}
	if err := join(cfg.problems()); err != nil {
		return ExactlyOnceConfig{}, fmt.Errorf("%w: %w", relay.ErrBadURL, err)
	}
	return cfg, nil
}

// eoPair is what the two halves of an exactly-once pair share.
type eoPair struct {
	sess *kgo.GroupTransactSession
	cfg  SubscriberConfig
	log  *slog.Logger
	tp   *txProducer
	pub  *driver.Publisher
	sub  *eoSubscriber
	refs atomic.Int32 // halves not closed yet
	// assigned is what the pair's member holds (see eoDriver.Assignment).
	assigned assigned

	// fenced is closed once the producer was fenced (p.fence): the
	// subscription then ends at once, leaving the group, without waiting
	// for the records of its transaction.
	fenced    chan struct{}
	fenceOnce sync.Once

	mu     sync.Mutex
	active bool  // a subscription runs
	failed error // the error that ended the session for good (fenced)
}

// fence ends the pair after a fencing error (relay.ErrFenced): Health
// reports it and the subscription ends (see eoReceiver.Receive).
func (p *eoPair) fence(err error) {
	p.fail(err)
	p.fenceOnce.Do(func() {
		p.log.Error("relay/kafka: exactly-once pair fenced; it leaves the group and ends its subscription "+
			"(open a new pair: the bridge does)", "err", err)
		close(p.fenced)
	})
}

// release closes the session when both halves are closed.
func (p *eoPair) release() {
	if p.refs.Add(-1) == 0 {
		p.sess.Close()
	}
}

func (p *eoPair) fail(err error) {
	p.mu.Lock()
	if p.failed == nil {
		p.failed = err
	}
	p.mu.Unlock()
}

// eoSubscriber is the subscribing half; see NewExactlyOnce.
type eoSubscriber struct {
	*driver.Subscriber
	p *eoPair
}

// Health implements relay.HealthChecker: the error that ended the pair
// (relay.ErrFenced wrapped, once fenced), also after Close, so that whoever
// ran it can tell a fence from another end; else the subscriber's health.
func (s *eoSubscriber) Health() error {
	s.p.mu.Lock()
	err := s.p.failed
	s.p.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Subscriber.Health()
}

// ExactlyOnceWith implements relay.ExactlyOnceSubscriber.
func (s *eoSubscriber) ExactlyOnceWith(pub relay.Publisher) bool {
	d, ok := pub.(*driver.Publisher)
	return ok && d == s.p.pub
}

// eoDriver is the subscribing half's driver.SubscribeDriver.
type eoDriver struct {
	p      *eoPair
	topics *topicMaker
	health *health
}

func (d *eoDriver) Capabilities() relay.Capabilities { return capabilities(DefaultMaxMessageBytes) }

// Health implements relay.HealthChecker: the error that ended the pair
// (ErrFenced wrapped), else nil while some broker answers.
func (d *eoDriver) Health() error {
	d.p.mu.Lock()
	err := d.p.failed
	d.p.mu.Unlock()
	if err != nil {
		return err
	}
	return d.health.err()
}

func (d *eoDriver) Close() error {
	d.p.release()
	return nil
}

func (d *eoDriver) ensureTopic(ctx context.Context, topic string) error {
	if d.p.cfg.NoCreateTopics {
		return d.topics.mustExist(ctx, topic)
	}
	return d.topics.ensure(ctx, topic)
}

// Provision creates topic unless create_topics=false. A new group starts
// at the oldest record, so nothing published before its first Subscribe
// is missed.
func (d *eoDriver) Provision(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	return d.ensureTopic(ctx, topic)
}

// Subscribe starts the pair's one subscription.
func (d *eoDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	d.p.mu.Lock()
	if d.p.failed != nil {
		err := d.p.failed
		d.p.mu.Unlock()
		return nil, err
	}
	if d.p.active {
		d.p.mu.Unlock()
		return nil, fmt.Errorf("relay/kafka: an exactly-once pair serves one subscription at a time (topic %q asked while another runs)", topic)
	}
	d.p.active = true
	d.p.mu.Unlock()
	if err := d.ensureTopic(ctx, topic); err != nil {
		d.p.mu.Lock()
		d.p.active = false
		d.p.mu.Unlock()
		return nil, err
	}
	d.p.sess.Client().AddConsumeTopics(topic)
	return &eoReceiver{p: d.p, topic: topic, scope: attemptScope(&d.p.cfg), arena: decodeArena(d.p.cfg), settled: make(chan struct{}, 1)}, nil
}

var _ relay.ExactlyOnceOpener = opener{}
