package gcppubsub

import (
	"context"
	"fmt"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// subDriver is the Subscriber's broker side: the group's subscriptions,
// created on first use, read with Pull.
type subDriver struct {
	conn *conn
	caps relay.Capabilities
	// attempts counts the deliveries of messages that this subscriber
	// nacked or released, by Pub/Sub message ID, where the subscription
	// has no dead-letter policy (without one Pub/Sub counts nothing).
	attempts driver.AttemptMemo[string]
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

// HoldsUntilDue implements driver.DueHolder (see pubDriver.HoldsUntilDue).
func (d *subDriver) HoldsUntilDue() bool { return true }

// ValidateTopic implements driver.TopicValidator.
func (d *subDriver) ValidateTopic(topic string) error { return validateTopic(topic) }

// deadLetterTopic is the topic that receives the dead letters of the
// group's subscription to topic, "" without a dead-letter policy.
func (d *subDriver) deadLetterTopic(topic string) string {
	cfg := d.conn.cfg
	switch {
	case cfg.MaxDeliveryAttempts == 0:
		return ""
	case cfg.DeadLetterTopic != "":
		return cfg.DeadLetterTopic
	}
	return shorten(SubscriptionID(topic, cfg.Group) + "-dlq")
}

// ensure returns the group's subscription to topic, creating it (and the
// topic, and the dead-letter topic with a subscription of the group) when
// it does not exist. An existing subscription is used as it is, but one
// bound to another topic, or without ordering when Ordered asks for it,
// is refused: relay's promises would not hold on it.
func (d *subDriver) ensure(ctx context.Context, topic string) (string, error) {
	if err := validateTopic(topic); err != nil {
		return "", err
	}
	dlq := d.deadLetterTopic(topic)
	if dlq == topic {
		dlq = "" // the group's subscription to its own dead-letter topic
	}
	return d.ensureSub(ctx, topic, dlq)
}

// ensureSub is ensure with the dead-letter topic dlq ("" for none) of a
// subscription it creates.
func (d *subDriver) ensureSub(ctx context.Context, topic, dlq string) (string, error) {
	cfg := d.conn.cfg
	name := SubscriptionID(topic, cfg.Group)
	path := subPath(cfg.Project, name)
	s, err := d.conn.subs.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: path})
	if code(err) == codes.NotFound {
		s, err = d.create(ctx, topic, path, dlq)
	}
	if err != nil {
		return "", fmt.Errorf("relay/gcppubsub: subscription %q of group %q to topic %q: %w", name, cfg.Group, topic, err)
	}
	if want := topicPath(cfg.Project, topic); s.GetTopic() != want {
		return "", fmt.Errorf("relay/gcppubsub: subscription %q exists but is bound to %q, not to %q; delete it or use another group", name, s.GetTopic(), want)
	}
	if cfg.Ordered && !s.GetEnableMessageOrdering() {
		return "", fmt.Errorf("relay/gcppubsub: subscription %q exists without message ordering, which cannot be turned on afterwards; ordered=true needs a subscription created with it: delete it or use another group", name)
	}
	return path, nil
}

// create makes the subscription path to topic, with the dead-letter
// topic dlq unless "", and the topics it needs.
func (d *subDriver) create(ctx context.Context, topic, path, dlq string) (*pb.Subscription, error) {
	cfg := d.conn.cfg
	if err := d.conn.createTopic(ctx, topic); err != nil {
		return nil, err
	}
	s := &pb.Subscription{
		Name:                  path,
		Topic:                 topicPath(cfg.Project, topic),
		AckDeadlineSeconds:    int32(cfg.AckDeadline / time.Second),
		EnableMessageOrdering: cfg.Ordered,
		// Never expire: Pub/Sub would delete a group idle for 31 days,
		// and with it every message published to it meanwhile.
		ExpirationPolicy: &pb.ExpirationPolicy{},
		Labels:           map[string]string{"created-by": "relay"},
	}
	if dlq != "" {
		// The dead-letter topic keeps its messages for the group, so that
		// Subscribe(ctx, dlq) in the same group reads them.
		if _, err := d.ensureSub(ctx, dlq, ""); err != nil {
			return nil, err
		}
		s.DeadLetterPolicy = &pb.DeadLetterPolicy{DeadLetterTopic: topicPath(cfg.Project, dlq), MaxDeliveryAttempts: int32(cfg.MaxDeliveryAttempts)}
	}
	created, err := d.conn.subs.CreateSubscription(ctx, s)
	if code(err) == codes.AlreadyExists {
		return d.conn.subs.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: path})
	}
	return created, err
}

// Provision implements driver.ProvisionDriver: it creates the topic and
// the group's subscription, so that messages published afterwards are
// kept for the group. Idempotent.
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	_, err := d.ensure(ctx, topic)
	return err
}

// Subscribe starts a subscription: Pull calls on the group's subscription.
func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	path, err := d.ensure(cctx, topic)
	cancel()
	if err != nil {
		return nil, err
	}
	return &receiver{d: d, topic: topic, path: path}, nil
}

// RemoveTopic implements driver.RemoveTopicDriver: it deletes the group's
// subscription and the topic (every group's messages of the topic go with
// it). Idempotent.
func (d *subDriver) RemoveTopic(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	cfg := d.conn.cfg
	sub := SubscriptionID(topic, cfg.Group)
	err := d.conn.subs.DeleteSubscription(ctx, &pb.DeleteSubscriptionRequest{Subscription: subPath(cfg.Project, sub)})
	if err != nil && code(err) != codes.NotFound {
		return fmt.Errorf("relay/gcppubsub: deleting subscription %q: %w", sub, err)
	}
	err = d.conn.topics.DeleteTopic(ctx, &pb.DeleteTopicRequest{Topic: topicPath(cfg.Project, topic)})
	if err != nil && code(err) != codes.NotFound {
		return fmt.Errorf("relay/gcppubsub: deleting topic %q: %w", topic, err)
	}
	return nil
}

// Close closes the connection; every subscription has ended by now.
func (d *subDriver) Close() error { return d.conn.close() }
