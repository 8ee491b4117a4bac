package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// topicMaker creates missing topics once per client. Safe for concurrent use.
type topicMaker struct {
	adm         *kadm.Client
	partitions  int32
	replication int16

	known driver.Lookups[struct{}] // topics known to exist
}

func newTopicMaker(adm *kadm.Client, c *Config) *topicMaker {
	t := &topicMaker{adm: adm, partitions: -1, replication: -1}
	if c.Partitions > 0 {
		t.partitions = int32(c.Partitions)
	}
	if c.Replication > 0 {
		t.replication = int16(c.Replication)
	}
	return t
}

// ensure makes sure topic exists, creating it with the configured
// partitions and replication. Concurrent callers for one topic share one
// attempt; a failed attempt is not remembered (see driver.Lookups).
func (t *topicMaker) ensure(ctx context.Context, topic string) error {
	_, err := t.known.Get(ctx, topic, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.create(ctx, topic)
	})
	return err
}

func (t *topicMaker) exists(ctx context.Context, topic string) (bool, error) {
	td, err := t.adm.ListTopics(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("relay/kafka: looking up topic %q: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return false, nil
	}
	if d.Err != nil {
		return false, fmt.Errorf("relay/kafka: looking up topic %q: %w", topic, d.Err)
	}
	return true, nil
}

func (t *topicMaker) create(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	ok, err := t.exists(ctx, topic)
	if err != nil || ok {
		return err
	}
	_, err = t.adm.CreateTopic(ctx, t.partitions, t.replication, nil, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("relay/kafka: creating topic %q: %w", topic, err)
	}
	return nil
}

// mustExist reports a missing topic as an error (create_topics=false).
func (t *topicMaker) mustExist(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	ok, err := t.exists(ctx, topic)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("relay/kafka: topic %q does not exist and create_topics=false: %w", topic, relay.ErrInvalidTopic)
	}
	return nil
}

// remove deletes topic; a missing topic is not an error.
func (t *topicMaker) remove(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	t.known.Forget(topic)
	r, err := t.adm.DeleteTopic(ctx, topic)
	if err == nil {
		err = r.Err
	}
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("relay/kafka: deleting topic %q: %w", topic, err)
	}
	return nil
}
