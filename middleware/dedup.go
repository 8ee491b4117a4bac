package middleware

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// DedupState is the outcome of Store.Reserve.
type DedupState int

const (
	// Reserved: the caller holds the key until Commit, Release or the
	// lease expires; it runs the handler.
	Reserved DedupState = iota
	// InProgress: another holder reserved the key and its lease has not
	// expired; the message must be tried again later, not dropped (the
	// holder may fail or die).
	InProgress
	// Done: the key was committed within its TTL; the message is a
	// duplicate of one that was handled.
	Done
)

func (s DedupState) String() string {
	switch s {
	case Reserved:
		return "reserved"
	case InProgress:
		return "in progress"
	case Done:
		return "done"
	}
	return fmt.Sprintf("DedupState(%d)", int(s))
}

// Store records which keys are being handled and which were handled. It is
// shared by every replica that must not repeat an effect; implementations
// are safe for concurrent use and atomic per key.
type Store interface {
	// Reserve claims key for token for lease, unless the key is reserved
	// (InProgress) or committed (Done). A key that token holds already is
	// Reserved again, its lease renewed, so that a call retried after a
	// lost answer is harmless.
	Reserve(ctx context.Context, key, token string, lease time.Duration) (DedupState, error)
	// Commit marks key done for ttl, whoever holds it now.
	Commit(ctx context.Context, key, token string, ttl time.Duration) error
	// Release drops the reservation of key if token still holds it; a
	// committed key or another holder's reservation is left alone.
	Release(ctx context.Context, key, token string) error
}

// BatchStore is a Store that also takes many keys per call, so that a
// batch of messages costs one store round trip per step instead of one per
// message. The bridge's pipelined routes use it when their store has it
// (dedupredis.Store does); Dedup, which handles one message at a time,
// does not need it.
//
// Each method does for every key what the one-key method does, with the
// same atomicity per key (none across keys). keys holds no key twice.
// Safe for concurrent use, like Store.
//
// A type that embeds a BatchStore to change one of its one-key methods
// must change the batch method too, or callers taking the batch path
// bypass the change.
type BatchStore interface {
	Store
	// ReserveBatch reserves each of keys for token for lease, as Reserve
	// does, and returns the outcome for keys[i] in states[i]. On error
	// states is nil and some keys may be reserved for token: the caller
	// releases them all (ReleaseBatch leaves other holders' keys alone).
	ReserveBatch(ctx context.Context, keys []string, token string, lease time.Duration) (states []DedupState, err error)
	// CommitBatch marks each of keys done for ttl, as Commit does. On
	// error some of them may be marked.
	CommitBatch(ctx context.Context, keys []string, token string, ttl time.Duration) error
	// ReleaseBatch drops the reservation of each of keys that token still
	// holds, as Release does. On error some of them may be dropped.
	ReleaseBatch(ctx context.Context, keys []string, token string) error
}

// ErrInProgress is returned by Dedup for a message whose key another
// handler (this or another replica) is handling right now; the router
// redelivers it later, when the other one has committed (then it is acked
// as a duplicate) or released (then it runs).
var ErrInProgress = errors.New("dedup: a message with this key is being handled elsewhere")

// DedupConfig configures Dedup.
type DedupConfig struct {
	// Store is shared by the replicas. Required.
	Store Store
	// Key returns the dedup key of a message; "" handles the message
	// without dedup. Default: the handler name and the message ID
	// ("billing/0190..."), so that the same message consumed by two
	// handlers runs in each.
	Key func(ctx context.Context, msg *relay.Message) string
	// Lease is how long a reservation holds while the handler runs. It must
	// exceed the longest handling (use Timeout): a reservation that
	// outlives it lets a duplicate run concurrently. A reservation left by a
	// crashed replica blocks the key for this long. Default 1m.
	Lease time.Duration
	// TTL is how long a handled key is remembered: duplicates arriving
	// later run again. Default 24h.
	TTL time.Duration
	// StoreTimeout bounds each store call. Default 0: the store's own
	// timeouts apply (a go-redis client has read and write timeouts).
	StoreTimeout time.Duration
	// FailOpen handles the message without dedup when the store fails
	// (availability over duplicate suppression). Default false: the
	// message fails and is redelivered.
	FailOpen bool
	// Logger receives store failures. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem of c at once.
func (c DedupConfig) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("dedup: Store is nil"))
	}
	for name, d := range map[string]time.Duration{"Lease": c.Lease, "TTL": c.TTL, "StoreTimeout": c.StoreTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("dedup: %s %v is negative", name, d))
		}
	}
	return errors.Join(errs...)
}

// DefaultDedupKey is the default DedupConfig.Key.
func DefaultDedupKey(ctx context.Context, msg *relay.Message) string {
	if msg.ID == "" {
		return ""
	}
	return router.HandlerName(ctx) + "/" + msg.ID
}

// Dedup runs the handler at most once per key while things go well, without
// giving up at-least-once when they do not:
//
//   - before the handler, the key is reserved in the Store (atomically, for
//     Lease);
//   - on success the key is committed (remembered for TTL) and the outputs
//     are returned; on failure the reservation is released, so the
//     redelivered message runs again instead of being swallowed;
//   - a message whose key is done is acked without running (no outputs);
//   - a message whose key is reserved by someone else fails with
//     ErrInProgress and is redelivered later.
//
// What this gives: a message delivered twice, or published twice with the
// same ID, has its effect once, across every replica sharing the Store, as
// long as the handling finishes within Lease and the duplicate arrives
// within TTL. What it does not give: exactly-once in all cases. If the
// handler's effect happens and the process dies before Commit, the
// redelivered message runs again after Lease (at-least-once); make the
// effect itself idempotent where that matters. A handler slower than
// Lease can run concurrently with a duplicate. Outputs of a handled message
// are not published again for its duplicates.
func Dedup(cfg DedupConfig) (router.Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Key == nil {
		cfg.Key = DefaultDedupKey
	}
	if cfg.Lease == 0 {
		cfg.Lease = time.Minute
	}
	if cfg.TTL == 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return func(next router.Handler) router.Handler {
		return func(ctx context.Context, msg *relay.Message) ([]*relay.Message, error) {
			return cfg.run(ctx, msg, next)
		}
	}, nil
}

func (c *DedupConfig) run(ctx context.Context, msg *relay.Message, next router.Handler) ([]*relay.Message, error) {
	key := c.Key(ctx, msg)
	if key == "" {
		return next(ctx, msg)
	}
	token := newToken()
	sctx, cancel := c.storeCtx(ctx)
	state, err := c.Store.Reserve(sctx, key, token, c.Lease)
	cancel()
	if err != nil {
		// The store may have reserved the key before the error reached
		// us: drop that (it is this token's, nobody else's), or the
		// redelivery would wait out the lease.
		rctx, rcancel := c.storeCtx(context.WithoutCancel(ctx))
		_ = c.Store.Release(rctx, key, token)
		rcancel()
		if c.FailOpen {
			c.Logger.Warn("dedup: store failed; handling without dedup", "key", key, "err", err)
			return next(ctx, msg)
		}
		return nil, fmt.Errorf("dedup: reserve %q: %w", key, err)
	}
	switch state {
	case Done:
		for _, o := range observers(ctx) {
			o.Deduplicated(ctx, msg, key)
		}
		return nil, nil
	case InProgress:
		return nil, fmt.Errorf("%w (key %q)", ErrInProgress, key)
	}

	outs, herr := c.call(ctx, msg, next, key, token)
	if herr != nil {
		return nil, herr
	}
	// The effect happened: a failed commit only weakens dedup for later
	// duplicates; failing the message now would repeat the effect.
	sctx, cancel = c.storeCtx(context.WithoutCancel(ctx))
	if err := c.Store.Commit(sctx, key, token, c.TTL); err != nil {
		c.Logger.Warn("dedup: commit failed; a duplicate may run again after the lease", "key", key, "err", err)
	}
	cancel()
	return outs, nil
}

// call runs next and releases the reservation if it fails or panics.
func (c *DedupConfig) call(ctx context.Context, msg *relay.Message, next router.Handler, key, token string) (outs []*relay.Message, err error) {
	ok := false
	defer func() {
		if ok {
			return
		}
		sctx, cancel := c.storeCtx(context.WithoutCancel(ctx))
		defer cancel()
		if rerr := c.Store.Release(sctx, key, token); rerr != nil {
			c.Logger.Warn("dedup: release failed; the key stays blocked until its lease expires", "key", key, "err", rerr)
		}
	}()
	outs, err = next(ctx, msg)
	ok = err == nil
	return outs, err
}

func (c *DedupConfig) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.StoreTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.StoreTimeout)
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
