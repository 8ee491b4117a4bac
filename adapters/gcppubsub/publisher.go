package gcppubsub

import (
	"context"
	"errors"
	"fmt"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// maxRequestBytes bounds the messages of one Publish request, below the
// service's 10 MB per request so that the request's own framing fits.
const maxRequestBytes = 9_500_000

// pubDriver is the Publisher's broker side: Publish requests of the raw
// API, one attempt each (the shared layer retries).
type pubDriver struct {
	conn *conn
	caps relay.Capabilities
}

func (d *pubDriver) Capabilities() relay.Capabilities { return d.caps }

// HoldsUntilDue implements driver.DueHolder: a message due later is sent
// at once with its due time, and subscriptions hold it with NackAfter
// until then.
func (d *pubDriver) HoldsUntilDue() bool { return true }

// Health implements relay.HealthChecker: the error of the last broker
// call when it failed.
func (d *pubDriver) Health() error { return d.conn.health() }

// ValidateTopic implements driver.TopicValidator.
func (d *pubDriver) ValidateTopic(topic string) error { return validateTopic(topic) }

// ValidateMessage implements driver.MessageValidator.
func (d *pubDriver) ValidateMessage(_ string, m *relay.Message) error { return validate(m, d.caps) }

// SendBatch publishes msgs in Publish requests of at most
// maxRequestBytes, one after the other, so that messages of one ordering
// key keep their order. When one fails, it and the messages after it are
// reported failed (Retryable when the fault passes); those before it
// were accepted. A topic that does not exist is created (CreateTopics)
// and the request sent again within the attempt.
func (d *pubDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	pms := make([]*pb.PubsubMessage, len(msgs))
	for i, m := range msgs {
		pms[i] = encode(m)
	}
	path := topicPath(d.conn.cfg.Project, topic)
	for start := 0; start < len(pms); {
		end, size := start, 0
		for end < len(pms) && (end == start || size+wireSize(pms[end]) <= maxRequestBytes) {
			size += wireSize(pms[end])
			end++
		}
		if err := d.publish(ctx, path, topic, pms[start:end]); err != nil {
			failed := make([]relay.MessageFailure, 0, len(msgs)-start)
			for _, m := range msgs[start:] {
				failed = append(failed, relay.MessageFailure{ID: m.ID, Err: err})
			}
			return driver.SendError(len(msgs), failed, nil)
		}
		start = end
	}
	return nil
}

// publish sends one request, creating the topic when it is missing and
// CreateTopics allows.
func (d *pubDriver) publish(ctx context.Context, path, topic string, pms []*pb.PubsubMessage) error {
	req := &pb.PublishRequest{Topic: path, Messages: pms}
	_, err := d.conn.topics.Publish(ctx, req, noRetry)
	if code(err) == codes.NotFound && d.conn.cfg.CreateTopics {
		if err = d.conn.createTopic(ctx, topic); err == nil {
			_, err = d.conn.topics.Publish(ctx, req, noRetry)
		}
	}
	d.conn.note(err)
	if err != nil {
		return classify(fmt.Errorf("relay/gcppubsub: publishing %d messages to %q: %w", len(pms), topic, err))
	}
	return nil
}

// CheckGroups implements driver.GroupCheckDriver: Pub/Sub keeps a message
// only for the subscriptions its topic has when it is published, so a
// topic without one, or missing, is a *relay.NoGroupError. It lists one
// subscription of the topic and creates nothing.
func (d *pubDriver) CheckGroups(ctx context.Context, topic string) error {
	path := topicPath(d.conn.cfg.Project, topic)
	_, err := d.conn.topics.ListTopicSubscriptions(ctx, &pb.ListTopicSubscriptionsRequest{Topic: path, PageSize: 1}).Next()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, iterator.Done):
		return &relay.NoGroupError{Backend: Scheme, Topic: topic, Detail: fmt.Sprintf("topic %q has no subscription", path)}
	case code(err) == codes.NotFound:
		return &relay.NoGroupError{Backend: Scheme, Topic: topic, Detail: fmt.Sprintf("topic %q does not exist", path)}
	}
	return fmt.Errorf("relay/gcppubsub: listing the subscriptions of topic %q: %w", path, err)
}

// Close closes the connection.
func (d *pubDriver) Close() error { return d.conn.close() }
