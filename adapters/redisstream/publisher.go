package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// maxBatch is how many XADDs one pipeline carries.
const maxBatch = 1000

func capabilities(maxBytes int) relay.Capabilities {
	return relay.Capabilities{
		Backend:              "redis",
		Durable:              true,
		CrossProcess:         true,
		Ordering:             relay.OrderPerTopic,
		NativeDelay:          true,
		MaxDelay:             maxDelay(DefaultClaimIdle),
		DelayedDelivery:      relay.DelayEmulated,
		NativeDeadLetter:     false,
		AttemptFromBroker:    true,
		Replay:               false,
		MaxMessageBytes:      maxBytes,
		MaxMessageBytesSetBy: "max_bytes= (at most 512 MiB, Redis's string limit)",
		MaxBatch:             maxBatch,
		RetainedBeforeGroup:  "kept in the stream (bounded by maxlen/maxage) and read by groups created later with start=0 (the default); start=$ skips them",
	}
}

// NewPublisher returns a publisher that writes through client. The client
// stays the caller's: Close does not close it. ctx bounds the initial
// server check. The publisher is safe for concurrent use.
func NewPublisher(ctx context.Context, client *redis.Client, cfg PublisherConfig) (relay.Publisher, error) {
	return newPublisher(ctx, client, cfg, false)
}

func newPublisher(ctx context.Context, client *redis.Client, cfg PublisherConfig, own bool) (relay.Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	need := version{5, 0}
	if cfg.MaxAge > 0 {
		need = version{6, 2}
	}
	if err := checkServer(ctx, client, need, "XADD MINID trimming (maxage)"); err != nil {
		return nil, err
	}
	d := &pubDriver{c: client, cfg: cfg, own: own, caps: capabilities(cfg.MaxBytes)}
	return driver.NewPublisher(d, 0), nil
}

type pubDriver struct {
	c    *redis.Client
	cfg  PublisherConfig
	own  bool
	caps relay.Capabilities
	// unhealthy is the connection error of the latest publish attempt,
	// nil once a publish went through.
	unhealthy atomic.Pointer[error]
}

// Health implements relay.HealthChecker without network I/O: the
// connection error the latest publish attempt met, or nil.
func (d *pubDriver) Health() error {
	if p := d.unhealthy.Load(); p != nil {
		return fmt.Errorf("relay/redis: %w", *p)
	}
	return nil
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

// CheckGroups implements driver.GroupCheckDriver: always nil, because
// the stream keeps every entry (bounded by maxlen/maxage) and a group
// created later reads from the start (start=0, the default), so a message
// published before any group exists is kept for it.
func (d *pubDriver) CheckGroups(context.Context, string) error { return nil }

// ValidateMessage checks the size of the entry as written (field names
// included) against MaxBytes, and that a delayed message has no more
// metadata entries than the mover's script can pass to XADD
// (maxDelayedMetadata).
func (d *pubDriver) ValidateMessage(_ string, m *relay.Message) error {
	if len(m.Metadata) > maxDelayedMetadata && !m.DeliverAt.IsZero() && time.Until(m.DeliverAt) > 0 {
		return &relay.LimitError{MessageID: m.ID, What: "metadata entries",
			Detail: fmt.Sprintf("%d on a delayed message; at most %d (the arguments a Lua script can pass to XADD)", len(m.Metadata), maxDelayedMetadata)}
	}
	return driver.SizeError(m, encodedSize(m), d.caps)
}

// xadd is the XADD command of m: the arguments go-redis's XAdd would
// build from an XAddArgs, built into one slice of the right size (XAdd's
// way costs an XAddArgs, Encode's slice and a larger one it copies into,
// for every message).
func (d *pubDriver) xadd(ctx context.Context, key string, m *relay.Message, minID string) *redis.StringCmd {
	args := make([]any, 0, 6+fieldCount(m))
	args = append(args, "xadd", key)
	if d.cfg.MaxLen > 0 {
		args = append(args, "maxlen", "~", d.cfg.MaxLen)
	} else if minID != "" {
		args = append(args, "minid", "~", minID)
	}
	args = append(args, "*")
	return redis.NewStringCmd(ctx, appendFields(args, m)...)
}

// SendBatch makes one attempt: it pipelines one XADD per message in one
// round trip; a message with a DeliverAt in the future is ZADDed to the
// stream's delayed set instead, in the same pipeline (see DelayedSuffix).
// A message that failed with a connection problem (Redis restarting,
// network down) is marked driver.Retryable, so that the shared publisher
// sends it again with backoff until ctx is done; a message that Redis
// rejects is reported in a *relay.PublishError. When every message failed
// with one error, that error is returned for the whole batch.
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	key := d.cfg.Prefix + topic
	var minID string
	if d.cfg.MaxAge > 0 {
		minID = strconv.FormatInt(time.Now().Add(-d.cfg.MaxAge).UnixMilli(), 10) + "-0"
	}
	var now time.Time // read once, only when some message carries a DeliverAt
	for _, m := range msgs {
		if !m.DeliverAt.IsZero() {
			now = time.Now()
			break
		}
	}
	cmds := make([]redis.Cmder, len(msgs))
	_, _ = d.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range msgs {
			if _, delayed := driver.Delay(m, now); delayed {
				cmds[i] = p.ZAdd(ctx, key+DelayedSuffix, redis.Z{Score: dueScore(m.DeliverAt), Member: d.delayedMember(m)})
				continue
			}
			cmd := d.xadd(ctx, key, m, minID)
			_ = p.Process(ctx, cmd) // queued; its result is read below
			cmds[i] = cmd
		}
		return nil
	})
	var failed []relay.MessageFailure
	var lastErr error
	for i, c := range cmds {
		switch err := c.Err(); {
		case err == nil:
		case transient(err) && ctx.Err() == nil:
			lastErr = err
			failed = append(failed, relay.MessageFailure{ID: msgs[i].ID, Err: driver.Retryable(err)})
		default:
			failed = append(failed, relay.MessageFailure{ID: msgs[i].ID, Err: publishErr(ctx, err)})
		}
	}
	if lastErr != nil {
		d.unhealthy.Store(&lastErr)
	} else if len(failed) < len(msgs) {
		d.unhealthy.Store(nil)
	}
	return driver.SendError(len(msgs), failed, nil)
}

func publishErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("relay/redis: %w: %v", cerr, err)
	}
	return fmt.Errorf("relay/redis: XADD: %w", err)
}

// Close closes the client when the publisher opened it from a URL.
func (d *pubDriver) Close() error {
	if d.own {
		return d.c.Close()
	}
	return nil
}
