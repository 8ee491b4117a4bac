package sqs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/go-relay/relay"
)

// Name limits of the services.
const (
	// MaxQueueName is SQS's limit on queue names, ".fifo" included.
	MaxQueueName = 80
	// MaxTopicName is SNS's limit on topic names, ".fifo" included.
	MaxTopicName = 256
	// nameHashLen is how many hex digits of SHA-256 a shortened name ends in.
	nameHashLen = 10
)

// ShortenName returns name when it has at most limit characters, and
// otherwise the name the adapter uses in its place: the first characters of
// name, "-", and the first 10 hex digits of the SHA-256 of the whole name,
// with ".fifo" kept last, limit characters in all. The result depends on
// name and limit only, so every process (and every version of relay) finds
// the same queue or topic. Names within the limit are used unchanged.
//
// For a group queue, name is "<topic>-<group>" (or
// "<topic without .fifo>-<group>.fifo") and limit is MaxQueueName; for an
// SNS topic, the relay topic and MaxTopicName.
func ShortenName(name string, limit int) string {
	if len(name) <= limit {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	tail := "-" + hex.EncodeToString(sum[:])[:nameHashLen]
	if isFIFO(name) {
		tail += ".fifo"
	}
	keep := max(0, limit-len(tail))
	return name[:keep] + tail
}

// snsTopicName is the SNS topic of relay topic topic.
func snsTopicName(topic string) string { return ShortenName(topic, MaxTopicName) }

// groupQueueName is the queue of group on SNS topic topic:
// "<topic>-<group>", keeping ".fifo" last for FIFO topics, shortened by
// ShortenName when longer than SQS allows.
func groupQueueName(topic, group string) string {
	name := topic + "-" + group
	if isFIFO(topic) {
		name = strings.TrimSuffix(topic, ".fifo") + "-" + group + ".fifo"
	}
	return ShortenName(name, MaxQueueName)
}

// queueBinding ties an explicitly named group queue (Config.Queue) to the
// one topic it serves: one queue subscribed to two topics would mix their
// messages.
type queueBinding struct {
	mu    sync.Mutex
	topic string
}

// queueName returns the queue of this subscriber's group for topic on
// sns://: Config.Queue when set (for one topic only), otherwise the
// derived groupQueueName.
func (d *subDriver) queueName(topic string) (string, error) {
	if d.cfg.Queue == "" {
		return groupQueueName(topic, d.cfg.Group), nil
	}
	if isFIFO(topic) != isFIFO(d.cfg.Queue) {
		return "", fmt.Errorf("%w: queue %q for topic %q: a FIFO topic needs a queue whose name ends in .fifo, a standard topic a standard queue", relay.ErrInvalidTopic, d.cfg.Queue, topic)
	}
	b := &d.queueTopic
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.topic == "" {
		b.topic = topic
	}
	if b.topic != topic {
		return "", fmt.Errorf("%w: this subscriber's queue %q (queue=) serves topic %q; open another subscriber, with its own queue, for topic %q", relay.ErrInvalidTopic, d.cfg.Queue, b.topic, topic)
	}
	return d.cfg.Queue, nil
}

// validateQueue checks Config.Queue for scheme.
func (c Config) validateQueue(scheme string) error {
	switch {
	case c.Queue == "":
		return nil
	case scheme == SchemeSQS:
		return fmt.Errorf("relay/sqs: Queue: sqs:// reads the queue named by the topic; queue= names the group queue of an sns:// subscriber")
	case !queueNameRe.MatchString(strings.TrimSuffix(c.Queue, ".fifo")) || len(c.Queue) > MaxQueueName:
		return fmt.Errorf("relay/sqs: Queue: %q is not an SQS queue name: 1-80 characters of A-Z a-z 0-9 - _, ending in .fifo for a FIFO queue", c.Queue)
	}
	return nil
}
