package relay

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoGroup is matched (errors.Is) by the error GroupChecker.CheckGroups
// returns for a topic that no group would receive a message from (one
// published now would be lost), and by the error GroupPublisher returns
// for a group that does not exist. Every such error is a *NoGroupError.
var ErrNoGroup = errors.New("relay: the topic has no group")

// GroupChecker is implemented by publishers that can tell, before
// publishing, whether a message published to a topic now would reach a
// group. Every publisher of this module implements it.
//
// CheckGroups publishes nothing and creates nothing; ctx bounds its broker
// calls. It returns:
//
//   - nil when a message published to topic now would be kept for at least
//     one group: the topic has one, or the backend keeps what is published
//     for groups created later (Kafka, Redis Streams, NATS JetStream, plain
//     SQS and the in-process backend: see Capabilities.RetainedBeforeGroup);
//   - a *NoGroupError (matching ErrNoGroup) when it would reach no group
//     and be lost: PostgreSQL and SNS keep nothing for a group that does
//     not exist yet, and RabbitMQ returns such a message unroutable;
//   - an error wrapping ErrNotSupported when the broker cannot tell;
//   - another error when the broker could not be asked.
//
// The answer holds when it is given: a group created or removed afterwards
// changes it.
type GroupChecker interface {
	CheckGroups(ctx context.Context, topic string) error
}

// NoGroupError is what GroupChecker.CheckGroups returns for a topic without
// a group. Its text says what the broker showed and how to provision a
// group, so that a command line tool can print it as it is.
type NoGroupError struct {
	// Backend is the Capabilities.Backend of the publisher ("postgres", ...).
	Backend string
	// Topic is the topic that has no group.
	Topic string
	// Group, when set, is the one group that does not exist (from
	// GroupPublisher.PublishToGroup); the topic may have others.
	Group string
	// Detail is what the broker showed, e.g. `exchange "orders" does not exist`.
	Detail string
}

func (e *NoGroupError) Error() string {
	if e.Group != "" {
		return fmt.Sprintf("relay/%s: group %q of topic %q does not exist (%s); "+
			"provision it first with `relay provision URL %s --group %s` (or Subscriber.Provision)",
			e.Backend, e.Group, e.Topic, e.Detail, e.Topic, e.Group)
	}
	return fmt.Sprintf("relay/%s: topic %q has no group (%s): a message published to it now would be delivered to no one; "+
		"provision a group first with `relay provision URL %s --group GROUP` (or Subscriber.Provision)",
		e.Backend, e.Topic, e.Detail, e.Topic)
}

// Is makes errors.Is(err, ErrNoGroup) true.
func (e *NoGroupError) Is(target error) bool { return target == ErrNoGroup }

// GroupNamer is implemented by subscribers that know the group they were
// opened for (every subscriber of this module). Group returns it, or ""
// where the topic itself is the group (sqs://). The router passes it to
// handlers (router.Group), and the PoisonQueue middleware records it in
// the poison copy, so that `relay replay --per-group` can send the message
// back to the group that failed it.
type GroupNamer interface {
	Group() string
}

// GroupPublisher is implemented by publishers whose broker can deliver a
// message to one group of a topic, not to all of them: PublishToGroup
// publishes msgs so that only group receives them, as if they had been
// published to topic while it was the topic's only group. It is Publish
// in every other respect (the same checks, confirmation and errors), but
// takes no message with a DeliverAt in the future. A group that does not
// exist is an error matching ErrNoGroup. RabbitMQ, PostgreSQL and SNS can;
// backends whose groups all read one log (Kafka, Redis Streams, NATS
// JetStream) cannot, nor can plain SQS (the queue is the group): their
// publishers return an error wrapping ErrNotSupported.
// Capabilities.PublishToGroup says which without a call.
type GroupPublisher interface {
	PublishToGroup(ctx context.Context, topic, group string, msgs ...*Message) error
}
