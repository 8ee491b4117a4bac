package relay

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoGroup is matched (errors.Is) by the error GroupChecker.CheckGroups
// returns for a topic that no group would receive a message from: one
// published now would be lost. Every such error is a *NoGroupError.
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
	// Detail is what the broker showed, e.g. `exchange "orders" does not exist`.
	Detail string
}

func (e *NoGroupError) Error() string {
	return fmt.Sprintf("relay/%s: topic %q has no group (%s): a message published to it now would be delivered to no one; "+
		"provision a group first with `relay provision URL %s --group GROUP` (or Subscriber.Provision)",
		e.Backend, e.Topic, e.Detail, e.Topic)
}

// Is makes errors.Is(err, ErrNoGroup) true.
func (e *NoGroupError) Is(target error) bool { return target == ErrNoGroup }
