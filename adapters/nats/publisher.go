package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// publishAckTimeout bounds the wait for one asynchronous publish's ack;
// a publish without an ack by then is sent again (JetStream's duplicate
// window makes that safe) until the Publish ctx ends.
const publishAckTimeout = 10 * time.Second

func capabilities(maxPayload int) relay.Capabilities {
	return relay.Capabilities{
		Backend:           "nats",
		Durable:           true,
		CrossProcess:      true,
		Ordering:          relay.OrderPerTopic,
		NativeDelay:       true,
		DelayedDelivery:   relay.DelayEmulated, // held by subscribers: see DueHolder
		NativeDeadLetter:  false,
		AttemptFromBroker: true,
		Replay:            false,
		MaxMessageBytes:   maxPayload,
		// max_bytes= bounds a stream's bytes, not a message.
		MaxMessageBytesSetBy: "the NATS server's max_payload (its configuration file)",
		MaxBatch:             DefaultPublishBatch,
		DeduplicatesByID:     true, // Nats-Msg-Id within the stream's duplicate window
		RetainedBeforeGroup:  "kept in the topic's stream (bounded by its limits) and read by groups created later, which start at the stream's first message",
	}
}

// streams creates topics' streams on first use and remembers them.
type streams struct {
	js   jetstream.JetStream
	cfg  StreamConfig
	have driver.Lookups[string] // topic -> stream name
}

// name is the stream that holds topic, creating it when the adapter
// manages streams. A stream that exists already is used as it is.
func (s *streams) name(ctx context.Context, topic string) (string, error) {
	if s.cfg.Stream != "" {
		return s.cfg.Stream, nil
	}
	return s.have.Get(ctx, topic, func(ctx context.Context) (string, error) {
		name := StreamName(topic)
		_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: "relay topic " + topic,
			Subjects:    []string{topic},
			Storage:     storageType(s.cfg.Storage),
			Replicas:    max(1, s.cfg.Replicas),
			MaxAge:      s.cfg.MaxAge,
			MaxMsgs:     orUnlimited(s.cfg.MaxMsgs),
			MaxBytes:    orUnlimited(s.cfg.MaxBytes),
			Duplicates:  s.cfg.DuplicateWindow,
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return "", fmt.Errorf("relay/nats: creating stream %q for topic %q: %w", name, topic, err)
		}
		return name, nil
	})
}

// forget drops topic from the cache, so that the next use creates its
// stream again (it was deleted).
func (s *streams) forget(topic string) { s.have.Forget(topic) }

func storageType(s Storage) jetstream.StorageType {
	if s == StorageMemory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

func orUnlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// NewPublisher returns a publisher that writes through nc, creating
// topics' streams with sc (or using sc.Stream). The connection stays the
// caller's: Close does not close it. The publisher is safe for concurrent
// use.
func NewPublisher(nc *natsgo.Conn, sc StreamConfig) (relay.Publisher, error) {
	return newPublisher(nc, sc, false)
}

func newPublisher(nc *natsgo.Conn, sc StreamConfig, own bool) (relay.Publisher, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	sc.defaults()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(publishAckTimeout))
	if err != nil {
		return nil, err
	}
	d := &pubDriver{nc: nc, own: own, js: js, streams: &streams{js: js, cfg: sc}, caps: capabilities(int(nc.MaxPayload()))}
	return driver.NewPublisher(d, 0), nil
}

type pubDriver struct {
	nc      *natsgo.Conn
	own     bool // nc was opened from a URL: Close closes it
	js      jetstream.JetStream
	streams *streams
	caps    relay.Capabilities
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

// CheckGroups implements driver.GroupCheckDriver: always nil, because
// the topic's stream keeps every message (bounded by its limits) and a
// group created later starts at the stream's first message, so a message
// published before any group exists is kept for it.
func (d *pubDriver) CheckGroups(context.Context, string) error { return nil }

// HoldsUntilDue implements driver.DueHolder: a delayed message is
// published at once with its due time in a header, and subscriptions hold
// it with NakWithDelay until then (see the package doc).
func (d *pubDriver) HoldsUntilDue() bool { return true }

// Health implements relay.HealthChecker: the connection's status.
func (d *pubDriver) Health() error { return connHealth(d.nc) }

func connHealth(nc *natsgo.Conn) error {
	if st := nc.Status(); st != natsgo.CONNECTED {
		return fmt.Errorf("relay/nats: connection is %s", st)
	}
	return nil
}

// ValidateTopic implements driver.TopicValidator: topic must be a
// concrete NATS subject.
func (d *pubDriver) ValidateTopic(topic string) error { return validateTopic(topic) }

// ValidateMessage checks the message as written (headers included)
// against the server's max_payload.
func (d *pubDriver) ValidateMessage(_ string, m *relay.Message) error {
	return driver.SizeError(m, encodedSize(m), d.caps)
}

// SendBatch makes one attempt: it publishes msgs asynchronously and
// waits for every ack. A message whose publish failed for a transient
// reason (no ack in time, no stream answering, the connection
// reconnecting, its reconnect buffer full) is marked driver.Retryable, so
// that the shared publisher publishes it again with backoff until ctx
// ends; JetStream's duplicate window drops a copy that was stored already,
// since every message carries its ID in Nats-Msg-Id. No stream answering
// makes the next attempt create the topic's stream again. A message that
// the server rejects is reported in a *relay.PublishError.
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	if _, err := d.streams.name(ctx, topic); err != nil {
		if ctx.Err() == nil && transient(err) {
			return driver.Retryable(err)
		}
		return err
	}
	var failed []relay.MessageFailure
	for i, err := range d.publishAll(ctx, topic, msgs) {
		switch {
		case err == nil:
		case ctx.Err() == nil && transient(err):
			failed = append(failed, relay.MessageFailure{ID: msgs[i].ID, Err: driver.Retryable(err)})
			if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, natsgo.ErrNoResponders) {
				d.streams.forget(topic)
			}
		default:
			failed = append(failed, relay.MessageFailure{ID: msgs[i].ID, Err: publishErr(ctx, err)})
		}
	}
	return driver.SendError(len(msgs), failed, nil)
}

// publishAll sends every message and waits for its ack, or for ctx; the
// result has one error (nil: stored) per message.
func (d *pubDriver) publishAll(ctx context.Context, topic string, msgs []*relay.Message) []error {
	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		f, err := d.js.PublishMsgAsync(encode(topic, m))
		if err != nil {
			errs[i] = err
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = err
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	return errs
}

// transient reports whether a publish may succeed when sent again.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code >= 500 || apiErr.Code == 408 || apiErr.Code == 503
	}
	return errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, natsgo.ErrNoResponders) ||
		errors.Is(err, natsgo.ErrTimeout) ||
		errors.Is(err, natsgo.ErrDisconnected) ||
		errors.Is(err, natsgo.ErrConnectionReconnecting) ||
		errors.Is(err, natsgo.ErrReconnectBufExceeded) || // the outage outlasts nats.go's reconnect buffer
		errors.Is(err, jetstream.ErrTooManyStalledMsgs) ||
		errors.Is(err, context.DeadlineExceeded) // a JetStream API call's own timeout
}

func publishErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("relay/nats: %w: %v", cerr, err)
	}
	return fmt.Errorf("relay/nats: publish: %w", err)
}

// Close closes the connection, when the publisher opened it from a URL,
// without draining: Publish calls have returned by now, and draining
// could wait on a broker that stopped answering.
func (d *pubDriver) Close() error {
	if d.own {
		d.nc.Close()
	}
	return nil
}
