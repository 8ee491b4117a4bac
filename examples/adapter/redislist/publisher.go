package redislist

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Limits of this adapter.
const (
	// MaxMessageBytes bounds payload, ID, Key and metadata of a message.
	MaxMessageBytes = 16 << 20
	// MaxBatch is how many messages one publish script carries.
	MaxBatch = 100
)

func capabilities() relay.Capabilities {
	return relay.Capabilities{
		Backend:           "redislist",
		Durable:           true, // as far as the server persists (AOF/RDB)
		CrossProcess:      true,
		Ordering:          relay.OrderPerTopic, // with one consumer per group
		NativeDelay:       false,               // the driver package emulates NackAfter
		AttemptFromBroker: true,                // the attempt lives in the element
		MaxMessageBytes:   MaxMessageBytes,
		// A fixed limit: say so in the errors that refuse a message.
		MaxMessageBytesSetBy: "the adapter (a fixed 16 MiB)",
		MaxBatch:             MaxBatch,
		RetainedBeforeGroup: "dropped: a message goes to the lists of the groups that exist " +
			"(were provisioned or subscribed) when it is published",
	}
}

// pubDriver is the driver.PublishDriver of this adapter.
type pubDriver struct {
	rc     *redis.Client
	prefix string
}

// NewPublisher connects to the server of c and returns a relay.Publisher
// built by driver.NewPublisher. ctx bounds the connection check.
func NewPublisher(ctx context.Context, c Config) (*driver.Publisher, error) {
	rc := redis.NewClient(c.Redis)
	if err := rc.Ping(ctx).Err(); err != nil {
		_ = rc.Close()
		return nil, fmt.Errorf("relay/redislist: cannot reach Redis at %s: %w; check the host and port of the URL", c.Redis.Addr, err)
	}
	return driver.NewPublisher(&pubDriver{rc: rc, prefix: c.Prefix}, 0), nil
}

func (d *pubDriver) Capabilities() relay.Capabilities { return capabilities() }

// ValidateTopic implements driver.TopicValidator.
func (d *pubDriver) ValidateTopic(topic string) error { return validateTopic(topic) }

// SendBatch implements driver.PublishDriver: one script call (one
// attempt) appends the whole batch to every group's list atomically. A
// connection problem is marked driver.Retryable, so that the shared
// publisher sends the batch again with backoff until ctx ends; a script
// that ran before the connection broke may then append the batch twice
// (at-least-once).
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	k := keys{d.prefix, topic}
	args := make([]any, 0, 1+len(msgs))
	args = append(args, k.groupBase())
	for _, m := range msgs {
		args = append(args, encode(m))
	}
	if err := publishScript.Run(ctx, d.rc, []string{k.groups()}, args...).Err(); err != nil {
		err = fmt.Errorf("relay/redislist: publishing %d messages to %q: %w", len(msgs), topic, err)
		if ctx.Err() == nil && connectionLost(err) {
			return driver.Retryable(err)
		}
		return err
	}
	return nil
}

// connectionLost reports whether err is a connection problem (refused,
// reset, dropped) rather than an answer of the server.
func connectionLost(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// Close implements driver.PublishDriver.
func (d *pubDriver) Close() error { return d.rc.Close() }
