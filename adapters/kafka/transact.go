package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// ErrFenced is (wrapped) the error of a transactional client that another
// client with the same transactional_id replaced: Kafka fenced it, its
// open transaction is aborted, and it can neither commit nor produce
// again. Close it; the newer instance carries on. It matches
// relay.ErrTakenOver (and so relay.ErrFenced).
var ErrFenced = errors.New("relay/kafka: fenced: another client with the same transactional_id took over; " +
	"this one's transaction was aborted and it cannot commit again")

// ErrTransactionTimedOut is (wrapped) the error of a transactional client
// whose open transaction outlived its transaction_timeout, as a pause of
// the process does (a GC pause, a frozen VM or container, a network
// partition): the coordinator aborted the transaction and bumped the
// producer epoch, so this client's producer is fenced. A new client (a new
// exactly-once pair) gets the new epoch and carries on; the bridge
// reopens the pair itself. It matches relay.ErrFenced, not
// relay.ErrTakenOver.
var ErrTransactionTimedOut = errors.New("relay/kafka: fenced: the transaction timed out " +
	"(open longer than transaction_timeout; the coordinator aborted it and bumped the producer epoch)")

// fenceError is a fencing error: its sentinel (ErrFenced or
// ErrTransactionTimedOut), the relay sentinel it matches, what was being
// done and the broker's error.
type fenceError struct {
	sentinel, relayErr error
	what               string
	err                error
}

func (e *fenceError) Error() string {
	return fmt.Sprintf("%v (%s: %v)", e.sentinel, e.what, e.err)
}

func (e *fenceError) Unwrap() []error { return []error{e.sentinel, e.relayErr, e.err} }

// fencedCode reports whether err is a broker's answer that the producer
// epoch this client uses is no longer current: another client of the same
// transactional_id, or the coordinator's abort of a timed-out
// transaction, bumped it.
func fencedCode(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping)
}

// fenced returns the fencing error for err, a fencedCode error met while
// doing what: ErrTransactionTimedOut when the transaction open at the time
// was older than timeout (so the coordinator's abort explains the new
// epoch), else ErrFenced. age is the open transaction's age, 0 with none.
func fenced(what string, err error, age, timeout time.Duration) error {
	if age > 0 && age >= timeout {
		return &fenceError{ErrTransactionTimedOut, relay.ErrFenced,
			fmt.Sprintf("%s; the transaction was open %v, transaction_timeout is %v", what, age.Round(100*time.Millisecond), timeout), err}
	}
	return &fenceError{ErrFenced, relay.ErrTakenOver, what, err}
}

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

// txError maps the error of ending a transaction or producing in one; a
// fencing error is ErrFenced (see txProducer.txError, which tells a
// timed-out transaction apart).
func txError(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, relay.ErrFenced):
		return err
	case fencedCode(err):
		return fenced(what, err, 0, 0)
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

	// timeout is the transaction timeout the client registered (kgo's
	// default when the config leaves it 0).
	timeout time.Duration
	// onFence, when set, is called once with the fencing error the first
	// time a send, Begin or End meets one; sends fail at once afterwards.
	onFence   func(error)
	fenceOnce sync.Once
	fenceErr  atomic.Pointer[error]

	mu     sync.RWMutex
	inTxn  bool
	began  time.Time     // when the open transaction began
	endAge time.Duration // the age of the transaction end is ending
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
		what:    what,
		timeout: cmp.Or(cfg.TransactionTimeout, defaultTransactionTimeout),
	}
}

// defaultTransactionTimeout is kgo's TransactionTimeout default.
const defaultTransactionTimeout = 40 * time.Second

// txAge is the open transaction's age, 0 with none. Call with mu held.
func (t *txProducer) txAge() time.Duration {
	if !t.inTxn || t.began.IsZero() {
		return 0
	}
	return time.Since(t.began)
}

// txError is txError with a fencing error told apart: a timed-out
// transaction (ErrTransactionTimedOut) or a takeover (ErrFenced). A
// fencing error is reported to onFence. age is the transaction's age when
// err happened.
func (t *txProducer) txError(what string, err error, age time.Duration) error {
	if err == nil {
		return nil
	}
	if fencedCode(err) && !errors.Is(err, relay.ErrFenced) {
		err = fenced(what, err, age, t.timeout)
	} else {
		err = txError(what, err)
	}
	if errors.Is(err, relay.ErrFenced) {
		t.fence(err)
	}
	return err
}

// fence records err, the first fencing error, and reports it to onFence.
func (t *txProducer) fence(err error) {
	t.fenceOnce.Do(func() {
		t.fenceErr.Store(&err)
		if t.onFence != nil {
			t.onFence(err)
		}
	})
}

// fencedErr is the fencing error met, nil before one.
func (t *txProducer) fencedErr() error {
	if p := t.fenceErr.Load(); p != nil {
		return *p
	}
	return nil
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
	if err := t.fencedErr(); err != nil {
		done(err) // kgo would fail every record; do not hand them over
		return
	}
	t.mu.RLock()
	if !t.inTxn {
		t.mu.RUnlock()
		done(fmt.Errorf("%w: %s", ErrNoTransaction, t.what))
		return
	}
	began := t.began
	// The plain path's errors (a *relay.PublishError naming the failed
	// messages) pass as they are, but for a fencing code (the epoch moved:
	// the transaction timed out or another client took over), which
	// becomes the fencing error and fences t.
	t.pubDriver.SendBatchAsync(ctx, topic, msgs, func(err error) {
		if err != nil && fencedCode(err) {
			err = t.txError("produce", err, time.Since(began))
		}
		done(err)
	})
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
	if err := t.fencedErr(); err != nil {
		return err
	}
	if err := beginFn(); err != nil {
		return t.txError("begin transaction", err, 0)
	}
	t.inTxn, t.began = true, time.Now()
	return nil
}

// end closes the open transaction with endFn, which flushes or aborts and
// ends it; endFn maps its errors with t.txError(what, err, t.endAge). No
// send is in the middle of handing over records meanwhile.
func (t *txProducer) end(endFn func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.inTxn {
		return fmt.Errorf("%w: %s", ErrNoTransaction, t.what)
	}
	t.endAge = t.txAge()
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
// ErrFenced when another client with the same transactional_id took over,
// ErrTransactionTimedOut when the transaction outlived its timeout (both
// match relay.ErrFenced: close the publisher and open a new one). Blocking;
// ctx bounds it (a cancelled Commit leaves the publisher
// unusable: close it).
func (p *TxPublisher) Commit(ctx context.Context) error {
	return p.tp.end(func() error {
		if err := p.tp.cl.Flush(ctx); err != nil {
			p.abortLocked(ctx)
			return p.tp.txError("flush before commit", err, p.tp.endAge)
		}
		err := p.tp.cl.EndTransaction(ctx, kgo.TryCommit)
		if err != nil {
			// A failed produce leaves kgo refusing the commit
			// (OperationNotAttempted): abort instead.
			if aerr := p.abortLocked(ctx); errors.Is(aerr, relay.ErrFenced) {
				return aerr
			}
			return p.tp.txError("commit transaction", err, p.tp.endAge)
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
		return p.tp.txError("abort buffered records", err, p.tp.endAge)
	}
	return p.tp.txError("abort transaction", p.tp.cl.EndTransaction(ctx, kgo.TryAbort), p.tp.endAge)
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
