package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// ErrFenced is (wrapped) the error of a transactional client that another
// client with the same transactional_id replaced: Kafka fenced it, its
// open transaction is aborted, and it can neither commit nor produce
// again. Close it; the newer instance carries on.
var ErrFenced = errors.New("relay/kafka: fenced: another client with the same transactional_id took over; " +
	"this one's transaction was aborted and it cannot commit again")

// ErrNoTransaction is (wrapped) the error of a transactional Publish made
// while no transaction is open: on a TxPublisher outside Begin and
// Commit/Abort, on an exactly-once pair's publisher while no message of the
// paired subscriber is being handled.
var ErrNoTransaction = errors.New("relay/kafka: no transaction is open")

// plainProblems are the settings NewPublisher refuses because only the
// transactional constructors use them.
func (c *PublisherConfig) plainProblems() []problem {
	if c.TransactionalID != "" {
		return []problem{{"transactional_id", "only kafka.NewTxPublisher and exactly-once pairs (kafka.NewExactlyOnce, " +
			"a bridge route with guarantee: exactly-once) are transactional; remove it for a plain publisher"}}
	}
	return nil
}

// txProblems are the problems of a transactional publisher's settings.
func (c *PublisherConfig) txProblems() []problem {
	var ps []problem
	if c.TransactionalID == "" {
		ps = append(ps, problem{"transactional_id", "required for a transactional client: a name stable across restarts " +
			"and unique per running instance (for example <service>-<instance>)"})
	}
	if c.Acks != AcksAll || c.NoIdempotence {
		ps = append(ps, problem{"acks", "transactions need acks=all and the idempotent producer"})
	}
	if c.TransactionTimeout < 0 {
		ps = append(ps, problem{"transaction_timeout", "must not be negative"})
	}
	return ps
}

// txOpts are the kgo options of a transactional producer.
func (c *PublisherConfig) txOpts() []kgo.Opt {
	opts := append(c.producerOpts(), kgo.TransactionalID(c.TransactionalID))
	if c.TransactionTimeout > 0 {
		opts = append(opts, kgo.TransactionTimeout(c.TransactionTimeout))
	}
	return opts
}

// txError maps the error of ending a transaction or producing in one.
func txError(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
		return fmt.Errorf("%w (%s: %w)", ErrFenced, what, err)
	case errors.Is(err, kgo.ErrClientClosed):
		return fmt.Errorf("relay/kafka: %s: %w: %w", what, relay.ErrClosed, err)
	}
	return fmt.Errorf("relay/kafka: %s: %w", what, err)
}

// txProducer is the producing half shared by TxPublisher and the
// exactly-once pair: the plain publisher's send path over a transactional
// client, admitted only while a transaction is open. Sends hold mu for
// reading while they hand records to the client, Begin and End hold it for
// writing, so no record is buffered while a transaction starts or ends
// (kgo forbids producing concurrently with those). Safe for concurrent use.
type txProducer struct {
	*pubDriver
	what string // names the publisher in errors

	mu    sync.RWMutex
	inTxn bool
	// onClose runs once at Close instead of closing the client (the
	// exactly-once pair closes the shared session when both halves are
	// closed).
	onClose func()
	once    sync.Once
}

func newTxProducer(cl *kgo.Client, cfg *PublisherConfig, h *health, what string) *txProducer {
	return &txProducer{
		pubDriver: &pubDriver{cl: cl, topics: newTopicMaker(kadm.NewClient(cl), &cfg.Config),
			caps: capabilities(cfg.MaxMessageBytes), create: !cfg.NoCreateTopics, health: h},
		what: what,
	}
}

// SendBatch implements driver.PublishDriver.
func (t *txProducer) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	out := make(chan error, 1)
	t.SendBatchAsync(ctx, topic, msgs, func(err error) { out <- err })
	return <-out
}

// SendBatchAsync implements driver.AsyncSender: the records join the open
// transaction, or the batch fails with ErrNoTransaction.
func (t *txProducer) SendBatchAsync(ctx context.Context, topic string, msgs []*relay.Message, done func(error)) {
	t.mu.RLock()
	if !t.inTxn {
		t.mu.RUnlock()
		done(fmt.Errorf("%w: %s", ErrNoTransaction, t.what))
		return
	}
	// The plain path's errors (a *relay.PublishError naming the failed
	// messages, kerr codes such as PRODUCER_FENCED wrapped) pass as they are.
	t.pubDriver.SendBatchAsync(ctx, topic, msgs, done)
	t.mu.RUnlock()
}

// begin opens a transaction with beginFn (kgo's BeginTransaction or the
// session's Begin).
func (t *txProducer) begin(beginFn func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inTxn {
		return fmt.Errorf("relay/kafka: %s: a transaction is already open", t.what)
	}
	if err := beginFn(); err != nil {
		return txError("begin transaction", err)
	}
	t.inTxn = true
	return nil
}

// end closes the open transaction with endFn, which flushes or aborts and
// ends it. No send is in the middle of handing over records meanwhile.
func (t *txProducer) end(endFn func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.inTxn {
		return fmt.Errorf("%w: %s", ErrNoTransaction, t.what)
	}
	t.inTxn = false
	return endFn()
}

// Close implements driver.PublishDriver.
func (t *txProducer) Close() error {
	t.once.Do(func() {
		if t.onClose != nil {
			t.onClose()
			return
		}
		t.cl.Close()
	})
	return nil
}

// TxPublisher publishes to any number of topics in Kafka transactions:
// what is published between Begin and Commit becomes visible to
// read_committed consumers (isolation=read_committed, the default) all at
// once, and what is published before Abort never. Publish (and
// PublishAsync) are safe for concurrent use within the open transaction;
// Begin, Commit and Abort are not to be called concurrently with each
// other. It implements relay.Publisher, relay.AsyncPublisher,
// relay.CapabilityReporter and relay.HealthChecker.
//
// One transactional_id is one producer at a time: opening a second
// TxPublisher (or exactly-once pair) with the same ID fences this one
// (its open transaction is aborted and Commit returns ErrFenced).
type TxPublisher struct {
	*driver.Publisher
	tp *txProducer
}

// NewTxPublisher connects a transactional publisher. cfg.TransactionalID
// is required; acks must be all with the idempotent producer (the
// defaults). ctx bounds connecting and the registration of the
// transactional ID with the broker, which fences an older client of the
// same ID at once.
func NewTxPublisher(ctx context.Context, cfg PublisherConfig) (*TxPublisher, error) {
	cfg.defaults()
	if err := join(append(cfg.problems(), cfg.txProblems()...)); err != nil {
		return nil, fmt.Errorf("%w: %w", relay.ErrBadURL, err)
	}
	opts, err := cfg.clientOpts()
	if err != nil {
		return nil, err
	}
	h := newHealth()
	cl, err := kgo.NewClient(append(append(opts, kgo.WithHooks(h)), cfg.txOpts()...)...)
	if err != nil {
		return nil, fmt.Errorf("relay/kafka: %w", err)
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, txError(fmt.Sprintf("registering transactional_id %q with %v", cfg.TransactionalID, cfg.Brokers), err)
	}
	tp := newTxProducer(cl, &cfg, h, fmt.Sprintf("transactional publisher %q", cfg.TransactionalID))
	return &TxPublisher{Publisher: driver.NewPublisher(tp, 0), tp: tp}, nil
}

// OpenTxPublisher is NewTxPublisher for a kafka:// URL with
// transactional_id= (see ParsePublisherURL).
func OpenTxPublisher(ctx context.Context, rawURL string) (*TxPublisher, error) {
	u, err := relay.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	cfg, err := ParsePublisherURL(u)
	if err != nil {
		return nil, err
	}
	return NewTxPublisher(ctx, cfg)
}

// Begin opens a transaction. It fails when one is already open or the
// publisher was fenced. It does not call the broker.
func (p *TxPublisher) Begin() error { return p.tp.begin(p.tp.cl.BeginTransaction) }

// Commit flushes what was published since Begin and commits it, so that
// read_committed consumers see all of it. On any failure the transaction
// is aborted (nothing of it becomes visible) and the error returned;
// ErrFenced when another client with the same transactional_id took over.
// Blocking; ctx bounds it (a cancelled Commit leaves the publisher
// unusable: close it).
func (p *TxPublisher) Commit(ctx context.Context) error {
	return p.tp.end(func() error {
		if err := p.tp.cl.Flush(ctx); err != nil {
			p.abortLocked(ctx)
			return txError("flush before commit", err)
		}
		err := p.tp.cl.EndTransaction(ctx, kgo.TryCommit)
		if err != nil {
			// A failed produce leaves kgo refusing the commit
			// (OperationNotAttempted): abort instead.
			p.abortLocked(ctx)
			return txError("commit transaction", err)
		}
		return nil
	})
}

// Abort drops what was published since Begin: read_committed consumers
// never see it. Blocking; ctx bounds it.
func (p *TxPublisher) Abort(ctx context.Context) error {
	return p.tp.end(func() error { return p.abortLocked(ctx) })
}

func (p *TxPublisher) abortLocked(ctx context.Context) error {
	if err := p.tp.cl.AbortBufferedRecords(ctx); err != nil {
		return txError("abort buffered records", err)
	}
	return txError("abort transaction", p.tp.cl.EndTransaction(ctx, kgo.TryAbort))
}

// Transact runs fn in a transaction: Begin, fn, then Commit when fn
// returns nil and Abort otherwise (fn's error is returned, joined with an
// abort failure). fn publishes with pub (this publisher). Blocking; not to
// be called concurrently with another transaction of p.
func (p *TxPublisher) Transact(ctx context.Context, fn func(ctx context.Context, pub relay.Publisher) error) error {
	if err := p.Begin(); err != nil {
		return err
	}
	if err := fn(ctx, p); err != nil {
		return errors.Join(err, p.Abort(ctx))
	}
	return p.Commit(ctx)
}
