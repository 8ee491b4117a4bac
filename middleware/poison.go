package middleware

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/uuid"
	"github.com/go-relay/relay/router"
)

// Metadata that PoisonQueue adds to the copy it publishes. Times are
// RFC 3339 with nanoseconds, UTC. `relay replay` reads PoisonTopicKey to
// send a message back where it came from.
const (
	PoisonReasonKey       = "relay-poison-reason"        // the handler's error text (truncated to MaxReasonBytes)
	PoisonTopicKey        = "relay-poison-topic"         // the topic the message was received from
	PoisonHandlerKey      = "relay-poison-handler"       // the router handler that failed
	PoisonAttemptsKey     = "relay-poison-attempts"      // handler runs in the last delivery (from Retry; 1 without)
	PoisonDeliveriesKey   = "relay-poison-deliveries"    // the message's delivery attempt (Message.Attempt)
	PoisonFirstFailureKey = "relay-poison-first-failure" // first failure in the last delivery
	PoisonLastFailureKey  = "relay-poison-last-failure"  // last failure
	PoisonPermanentKey    = "relay-poison-permanent"     // "true" when the error was marked relay.Permanent
	PoisonStackKey        = "relay-poison-stack"         // for a recovered panic: its stack (truncated)
	PoisonOriginalIDKey   = "relay-poison-original-id"   // the ID of the message that was poisoned
	PoisonGroupKey        = "relay-poison-group"         // the group of the handler's subscriber (router.Group), when it names one
)

// PoisonConfig configures PoisonQueue.
type PoisonConfig struct {
	// Publisher publishes the poisoned copies; any backend. Required. It is
	// not closed by the middleware.
	Publisher relay.Publisher
	// Topic is the poison topic. Required.
	Topic string
	// ShouldPoison selects the errors that poison a message; others are
	// returned so that the router nacks (redelivers) the message. Default:
	// every error.
	ShouldPoison func(err error) bool
	// AfterDeliveries poisons a message only from this delivery on
	// (Message.Attempt ≥ AfterDeliveries); earlier failures are returned,
	// so the router redelivers the message with its redelivery delay. A
	// permanent error (relay.Permanent) is poisoned at once. Use it to
	// retry through the broker (surviving restarts) instead of, or in
	// addition to, Retry. Default 1: poison on the first failure that
	// reaches PoisonQueue.
	AfterDeliveries int
	// MaxReasonBytes truncates the reason and stack metadata values.
	// Default 2048.
	MaxReasonBytes int
	// Now replaces the clock in tests.
	Now func() time.Time
}

// Validate reports every problem of c at once.
func (c PoisonConfig) Validate() error {
	var errs []error
	if c.Publisher == nil {
		errs = append(errs, errors.New("poison queue: Publisher is nil"))
	}
	if c.Topic == "" {
		errs = append(errs, fmt.Errorf("poison queue: %w: Topic is empty", relay.ErrInvalidTopic))
	}
	if c.AfterDeliveries < 0 {
		errs = append(errs, fmt.Errorf("poison queue: AfterDeliveries %d is negative", c.AfterDeliveries))
	}
	if c.MaxReasonBytes < 0 {
		errs = append(errs, fmt.Errorf("poison queue: MaxReasonBytes %d is negative", c.MaxReasonBytes))
	}
	return errors.Join(errs...)
}

// PoisonQueue moves messages that fail for good to a poison topic instead
// of redelivering them forever. When the rest of the chain fails (after
// Retry gave up, when Retry is inside), it publishes a copy of the message
// (same Key, Payload and Metadata, plus the Poison* keys) to the poison
// topic and returns success, so the router acks the original; the
// handler's outputs are dropped. The original is acked only after that
// publish succeeded: if it fails, PoisonQueue returns both errors and the
// router nacks the original, so nothing is lost.
//
// The copy has an ID of its own, PoisonID(original ID, handler name,
// topic), and the original ID in PoisonOriginalIDKey: copies that several
// handlers (or groups) poison into one shared topic are distinct messages,
// also on brokers that store one message per ID (NATS JetStream's
// duplicate window), while the same handler poisoning the same message
// again (its ack was lost and it came back) publishes the same ID, which
// such brokers and Dedup take as the duplicate it is. Give the handlers
// that share a poison topic distinct names, across processes too.
//
// It does not poison, and returns the error for redelivery, when the
// failure comes from shutdown (ctx done, or Retry interrupted), when
// ShouldPoison says no, and before AfterDeliveries.
func PoisonQueue(cfg PoisonConfig) (router.Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.AfterDeliveries == 0 {
		cfg.AfterDeliveries = 1
	}
	if cfg.MaxReasonBytes == 0 {
		cfg.MaxReasonBytes = 2048
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return func(next router.Handler) router.Handler {
		return func(ctx context.Context, msg *relay.Message) ([]*relay.Message, error) {
			outs, err := next(ctx, msg)
			if err == nil {
				return outs, nil
			}
			if !cfg.shouldPoison(ctx, msg, err) {
				return nil, err
			}
			cp := cfg.poisoned(ctx, msg, err)
			if perr := cfg.Publisher.Publish(ctx, cfg.Topic, cp); perr != nil {
				return nil, errors.Join(err, fmt.Errorf("poison queue: publishing to %q: %w", cfg.Topic, perr))
			}
			for _, o := range observers(ctx) {
				o.Poisoned(ctx, msg, err)
			}
			return nil, nil
		}
	}, nil
}

func (c *PoisonConfig) shouldPoison(ctx context.Context, msg *relay.Message, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var re *RetryError
	if errors.As(err, &re) && re.Interrupted() {
		return false
	}
	if c.ShouldPoison != nil && !c.ShouldPoison(err) {
		return false
	}
	return relay.IsPermanent(err) || max(msg.Attempt(), 1) >= c.AfterDeliveries
}

func (c *PoisonConfig) poisoned(ctx context.Context, msg *relay.Message, err error) *relay.Message {
	now := c.Now().UTC()
	attempts, first, last := 1, now, now
	reason := err
	var re *RetryError
	if errors.As(err, &re) {
		attempts, first, last = re.Attempts, re.FirstFailed.UTC(), re.LastFailed.UTC()
		if re == err {
			reason = re.Err // the handler's words; attempts have their own key
		}
	}
	topic := msg.Topic()
	if topic == "" {
		topic = router.Topic(ctx)
	}
	handler := router.HandlerName(ctx)
	cp := msg.Copy()
	cp.ID = PoisonID(msg.ID, handler, topic)
	if cp.Metadata == nil {
		cp.Metadata = relay.Metadata{}
	}
	md := cp.Metadata
	md[PoisonOriginalIDKey] = msg.ID
	md[PoisonReasonKey] = truncate(reason.Error(), c.MaxReasonBytes)
	md[PoisonTopicKey] = topic
	md[PoisonHandlerKey] = handler
	delete(md, PoisonGroupKey)
	if g := router.Group(ctx); g != "" {
		md[PoisonGroupKey] = g
	}
	md[PoisonAttemptsKey] = strconv.Itoa(attempts)
	md[PoisonDeliveriesKey] = strconv.Itoa(max(msg.Attempt(), 1))
	md[PoisonFirstFailureKey] = first.Format(time.RFC3339Nano)
	md[PoisonLastFailureKey] = last.Format(time.RFC3339Nano)
	md[PoisonPermanentKey] = strconv.FormatBool(relay.IsPermanent(err))
	delete(md, PoisonStackKey)
	var pe *router.PanicError
	if errors.As(err, &pe) {
		md[PoisonStackKey] = truncate(string(pe.Stack), c.MaxReasonBytes)
	}
	return cp
}

// poisonNamespace is the namespace of PoisonID's name-based UUIDs (a
// random UUID chosen once for relay; it must never change, or copies
// poisoned before and after an upgrade would not deduplicate).
var poisonNamespace = [16]byte{0x6b, 0x1f, 0x3e, 0x52, 0x9c, 0x0d, 0x4a, 0x87, 0xb2, 0x61, 0x5e, 0xd4, 0x08, 0xf3, 0x97, 0x2a}

// PoisonID is the ID of the poison copy that the handler named handler,
// subscribed to topic, publishes for the message with ID id: a name-based
// UUID (version 5, SHA-1, RFC 9562) of the three, so the same inputs
// always give the same ID and different ones give different IDs. Each
// part is length-prefixed, so no choice of bytes in one part can mimic
// another split.
func PoisonID(id, handler, topic string) string {
	h := sha1.New()
	h.Write(poisonNamespace[:])
	var n [binary.MaxVarintLen64]byte
	for _, part := range [...]string{id, handler, topic} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		h.Write([]byte(part))
	}
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return uuid.String(u)
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…[truncated]"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
