package gcppubsub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/go-relay/relay/driver"
)

// noRetry turns off the client's own retries of a data-plane call
// (Publish, Pull, Acknowledge, ModifyAckDeadline): the shared layer
// retries with its one policy, and a call must return when its attempt
// failed so that Health can say so.
var noRetry = gax.WithRetry(func() gax.Retryer { return nil })

// conn is the Pub/Sub client of one publisher or subscriber: the raw API
// clients of the topic and subscription services (the package the client
// library's Client is built on; not the Client itself, whose package
// starts an OpenCensus goroutine in every importing program), and the
// outcome of the latest broker call for Health.
type conn struct {
	cfg    Config
	topics *vkit.TopicAdminClient
	subs   *vkit.SubscriptionAdminClient

	mu      sync.Mutex
	lastErr error
}

// dial makes the client. It opens no connection yet (gRPC connects on
// the first call), but finds the credentials, so that missing ones fail
// here.
func dial(ctx context.Context, cfg Config) (*conn, error) {
	var opts []option.ClientOption
	switch {
	case cfg.Emulator != "":
		opts = append(opts, option.WithEndpoint(cfg.Emulator), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	case cfg.Endpoint != "":
		opts = append(opts, option.WithEndpoint(cfg.Endpoint))
	}
	if cfg.Emulator == "" {
		// As the client library's Client: a connection that went quiet is
		// probed after 5 minutes (Google's front ends refuse more frequent
		// pings); receive_timeout bounds a silent Pull before that.
		opts = append(opts, option.WithGRPCDialOption(grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Minute})))
	}
	if cfg.CredentialsFile != "" {
		opts = append(opts, option.WithAuthCredentialsFile(option.ServiceAccount, cfg.CredentialsFile))
	}
	opts = append(opts, cfg.ClientOptions...)
	topics, err := vkit.NewTopicAdminClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("relay/gcppubsub: client for project %q: %w", cfg.Project, err)
	}
	subs, err := vkit.NewSubscriptionAdminClient(ctx, opts...)
	if err != nil {
		_ = topics.Close()
		return nil, fmt.Errorf("relay/gcppubsub: client for project %q: %w", cfg.Project, err)
	}
	return &conn{cfg: cfg, topics: topics, subs: subs}, nil
}

// note records the outcome of a broker call for health.
func (c *conn) note(err error) {
	if err != nil && (errors.Is(err, context.Canceled) || code(err) == codes.Canceled) {
		return // ours: the caller gave up, the broker did not fail
	}
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
}

// health is the error of the latest broker call when it failed.
func (c *conn) health() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr != nil {
		return fmt.Errorf("relay/gcppubsub: the last call failed: %w", c.lastErr)
	}
	return nil
}

// createTopic creates topic; one that exists already is fine.
func (c *conn) createTopic(ctx context.Context, topic string) error {
	_, err := c.topics.CreateTopic(ctx, &pb.Topic{Name: topicPath(c.cfg.Project, topic), Labels: map[string]string{"created-by": "relay"}})
	if err != nil && code(err) != codes.AlreadyExists {
		return fmt.Errorf("creating topic %q: %w", topic, err)
	}
	return nil
}

func (c *conn) close() error {
	if err := errors.Join(c.topics.Close(), c.subs.Close()); err != nil {
		return fmt.Errorf("relay/gcppubsub: closing the client: %w", err)
	}
	return nil
}

// code is the gRPC status code of err (OK for nil).
func code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var s interface{ GRPCStatus() *status.Status }
	if errors.As(err, &s) {
		return s.GRPCStatus().Code()
	}
	return status.Code(err)
}

// transient reports whether err is a fault after which the same call may
// well succeed: the service unavailable or overloaded, no answer in time,
// an aborted or cancelled call, an internal error.
func transient(err error) bool {
	switch code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.Internal, codes.Unknown, codes.Canceled:
		return true
	}
	return false
}

// classify marks err Retryable when it is transient.
func classify(err error) error {
	if transient(err) {
		return driver.Retryable(err)
	}
	return err
}
