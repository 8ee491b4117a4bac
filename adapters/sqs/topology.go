package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

var (
	queueNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	topicNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

func isFIFO(name string) bool { return strings.HasSuffix(name, ".fifo") }

// validateName checks a topic name for scheme: an SQS queue name for
// sqs://, an SNS topic name for sns://.
func validateName(scheme, name string, fifoOnly bool) error {
	base := strings.TrimSuffix(name, ".fifo")
	switch scheme {
	case SchemeSQS:
		if !queueNameRe.MatchString(base) || len(name) > 80 {
			return fmt.Errorf("%w: %q: an SQS queue name is 1-80 characters of A-Z a-z 0-9 - _, ending in .fifo for a FIFO queue", relay.ErrInvalidTopic, name)
		}
	case SchemeSNS:
		// Longer names are shortened (snsTopicName); the charset stays.
		if !topicNameRe.MatchString(base) {
			return fmt.Errorf("%w: %q: an SNS topic name is made of A-Z a-z 0-9 - _, ending in .fifo for a FIFO topic", relay.ErrInvalidTopic, name)
		}
	}
	if fifoOnly && !isFIFO(name) {
		return fmt.Errorf("%w: %q: fifo=true needs FIFO topics, whose names end in .fifo", relay.ErrInvalidTopic, name)
	}
	return nil
}

// topology creates and finds queues, topics and subscriptions.
type topology struct {
	c   *clients
	cfg Config
	log *slog.Logger

	queues driver.Lookups[string] // queue name -> URL
	arns   driver.Lookups[string] // queue URL -> ARN
	topics driver.Lookups[string] // topic name -> ARN
	groups driver.Lookups[string] // topic name -> URL of this subscriber's group queue
}

// queueURL returns the URL of queue name, creating it unless NoCreateQueues.
func (t *topology) queueURL(ctx context.Context, name string) (string, error) {
	return t.queues.Get(ctx, name, func(ctx context.Context) (string, error) {
		if t.cfg.NoCreateQueues {
			out, err := t.c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
			if err != nil {
				if isQueueMissing(err) {
					return "", fmt.Errorf("relay/sqs: queue %q does not exist and create_queues=false: %w", name, err)
				}
				return "", fmt.Errorf("relay/sqs: finding queue %q: %w", name, err)
			}
			return aws.ToString(out.QueueUrl), nil
		}
		attrs, err := t.queueAttributes(ctx, name)
		if err != nil {
			return "", err
		}
		return t.createQueue(ctx, name, attrs)
	})
}

// forgetQueue makes the next use of queue name look it up (or create it) again.
func (t *topology) forgetQueue(name string) { t.queues.Forget(name) }

// queueAttributes are the attributes a queue this adapter creates gets:
// only what the configuration asks for, so that a queue created elsewhere
// with SQS's defaults is accepted as it is.
func (t *topology) queueAttributes(ctx context.Context, name string) (map[string]string, error) {
	attrs := map[string]string{}
	fifo := isFIFO(name)
	if fifo {
		attrs[string(sqstypes.QueueAttributeNameFifoQueue)] = "true"
		if t.cfg.FIFOHighThroughput {
			attrs[string(sqstypes.QueueAttributeNameDeduplicationScope)] = "messageGroup"
			attrs[string(sqstypes.QueueAttributeNameFifoThroughputLimit)] = "perMessageGroupId"
		}
	}
	if t.cfg.Retention > 0 {
		attrs[string(sqstypes.QueueAttributeNameMessageRetentionPeriod)] = strconv.Itoa(int(t.cfg.Retention.Seconds()))
	}
	if t.cfg.MaxBytes > DefaultMaxBytes {
		attrs[string(sqstypes.QueueAttributeNameMaximumMessageSize)] = strconv.Itoa(t.cfg.MaxBytes)
	}
	if t.cfg.MaxReceive > 0 {
		policy, err := t.redrivePolicy(ctx, name)
		if err != nil {
			return nil, err
		}
		attrs[string(sqstypes.QueueAttributeNameRedrivePolicy)] = policy
	}
	return attrs, nil
}

// dlqName is the dead-letter queue of queue name.
func (t *topology) dlqName(name string) string {
	if t.cfg.DLQ != "" {
		return t.cfg.DLQ
	}
	if isFIFO(name) {
		return ShortenName(strings.TrimSuffix(name, ".fifo")+"-dlq.fifo", MaxQueueName)
	}
	return ShortenName(name+"-dlq", MaxQueueName)
}

// redrivePolicy creates the dead-letter queue of name and returns the
// RedrivePolicy that sends messages there after MaxReceive receives.
func (t *topology) redrivePolicy(ctx context.Context, name string) (string, error) {
	dlq := t.dlqName(name)
	if dlq == name {
		return "", fmt.Errorf("relay/sqs: queue %q cannot be its own dead-letter queue", name)
	}
	if isFIFO(dlq) != isFIFO(name) {
		return "", fmt.Errorf("relay/sqs: dead-letter queue %q of %q: a FIFO queue needs a FIFO dead-letter queue and a standard one a standard one", dlq, name)
	}
	dlqURL, err := t.queues.Get(ctx, dlq, func(ctx context.Context) (string, error) {
		attrs := map[string]string{}
		if isFIFO(dlq) {
			attrs[string(sqstypes.QueueAttributeNameFifoQueue)] = "true"
		}
		if t.cfg.MaxBytes > DefaultMaxBytes {
			attrs[string(sqstypes.QueueAttributeNameMaximumMessageSize)] = strconv.Itoa(t.cfg.MaxBytes)
		}
		return t.createQueue(ctx, dlq, attrs)
	})
	if err != nil {
		return "", err
	}
	dlqArn, err := t.queueArn(ctx, dlqURL)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(map[string]string{"deadLetterTargetArn": dlqArn, "maxReceiveCount": strconv.Itoa(t.cfg.MaxReceive)})
	return string(b), nil
}

// createQueue creates queue name with attrs. A queue of that name with
// other attributes is used as it is (with a warning), except that a
// configured RedrivePolicy is applied to it.
func (t *topology) createQueue(ctx context.Context, name string, attrs map[string]string) (string, error) {
	out, err := t.c.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err == nil {
		return aws.ToString(out.QueueUrl), nil
	}
	if !isQueueExists(err) {
		return "", fmt.Errorf("relay/sqs: creating queue %q: %w", name, err)
	}
	got, gerr := t.c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if gerr != nil {
		return "", fmt.Errorf("relay/sqs: queue %q exists but cannot be found: %w", name, gerr)
	}
	url := aws.ToString(got.QueueUrl)
	t.log.Warn("relay/sqs: queue exists with other attributes; using it unchanged", "queue", name, "wanted", attrs)
	if rp, ok := attrs[string(sqstypes.QueueAttributeNameRedrivePolicy)]; ok {
		cur, err := t.c.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameRedrivePolicy}})
		if err != nil || cur.Attributes[string(sqstypes.QueueAttributeNameRedrivePolicy)] != rp {
			if _, err := t.c.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url),
				Attributes: map[string]string{string(sqstypes.QueueAttributeNameRedrivePolicy): rp}}); err != nil {
				return "", fmt.Errorf("relay/sqs: setting the dead-letter policy of queue %q: %w", name, err)
			}
		}
	}
	return url, nil
}

// queueArn returns the ARN of the queue at url.
func (t *topology) queueArn(ctx context.Context, url string) (string, error) {
	return t.arns.Get(ctx, url, func(ctx context.Context) (string, error) {
		out, err := t.c.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			return "", fmt.Errorf("relay/sqs: reading the ARN of queue %s: %w", url, err)
		}
		arn := out.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
		if arn == "" {
			return "", fmt.Errorf("relay/sqs: queue %s reported no QueueArn", url)
		}
		return arn, nil
	})
}

// topicArn returns the ARN of the SNS topic of relay topic topic (see
// snsTopicName), creating it unless NoCreateTopics (then it is built from
// Account, or looked up with ListTopics).
func (t *topology) topicArn(ctx context.Context, topic string) (string, error) {
	return t.topics.Get(ctx, topic, func(ctx context.Context) (string, error) {
		name := snsTopicName(topic)
		if !t.cfg.NoCreateTopics {
			in := &sns.CreateTopicInput{Name: aws.String(name)}
			if isFIFO(name) {
				in.Attributes = map[string]string{"FifoTopic": "true"}
			}
			out, err := t.c.sns.CreateTopic(ctx, in)
			if err != nil {
				return "", fmt.Errorf("relay/sqs: creating SNS topic %q: %w", name, err)
			}
			return aws.ToString(out.TopicArn), nil
		}
		arn, found, err := t.existingTopicArn(ctx, name)
		if err != nil || found {
			return arn, err
		}
		return "", fmt.Errorf("relay/sqs: SNS topic %q does not exist and create_topics=false", name)
	})
}

// forgetTopic makes the next use of topic name look it up again.
func (t *topology) forgetTopic(name string) { t.topics.Forget(name) }

// groupQueue provisions qname, the queue of this subscriber's group on SNS
// topic topic: the topic, the queue, the queue policy statement that lets
// the topic send to it, and the subscription (raw delivery unless
// NoRawDelivery). It returns the queue's URL. Every step is idempotent.
func (t *topology) groupQueue(ctx context.Context, topic, qname string) (string, error) {
	return t.groups.Get(ctx, topic, func(ctx context.Context) (string, error) {
		topicArn, err := t.topicArn(ctx, topic)
		if err != nil {
			return "", err
		}
		qurl, err := t.queueURL(ctx, qname)
		if err != nil {
			return "", err
		}
		qarn, err := t.queueArn(ctx, qurl)
		if err != nil {
			return "", err
		}
		if !t.cfg.NoQueuePolicy {
			if err := t.allowTopic(ctx, qurl, qarn, topicArn); err != nil {
				return "", err
			}
		}
		raw := "true"
		if t.cfg.NoRawDelivery {
			raw = "false"
		}
		_, err = t.c.sns.Subscribe(ctx, &sns.SubscribeInput{
			TopicArn:              aws.String(topicArn),
			Protocol:              aws.String("sqs"),
			Endpoint:              aws.String(qarn),
			Attributes:            map[string]string{"RawMessageDelivery": raw},
			ReturnSubscriptionArn: true,
		})
		if err != nil {
			// An existing subscription with other attributes (say, raw
			// delivery off) still delivers: envelopes are unwrapped.
			if apiCode(err) == "InvalidParameter" && strings.Contains(strings.ToLower(err.Error()), "already exists") {
				t.log.Warn("relay/sqs: the queue is already subscribed with other attributes; keeping that subscription", "topic", topic, "queue", qname, "err", err)
				return qurl, nil
			}
			return "", fmt.Errorf("relay/sqs: subscribing queue %q to topic %q: %w", qname, topic, err)
		}
		return qurl, nil
	})
}

// forgetGroup makes the next use of topic re-provision its group queue qname.
func (t *topology) forgetGroup(topic, qname string) {
	t.groups.Forget(topic)
	t.topics.Forget(topic)
	t.queues.Forget(qname)
}

// allowTopic merges a statement letting topicArn send into the queue's policy.
func (t *topology) allowTopic(ctx context.Context, qurl, qarn, topicArn string) error {
	out, err := t.c.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(qurl),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNamePolicy}})
	if err != nil {
		return fmt.Errorf("relay/sqs: reading the policy of queue %s: %w", qurl, err)
	}
	policy, changed, err := mergePolicy(out.Attributes[string(sqstypes.QueueAttributeNamePolicy)], qarn, topicArn)
	if err != nil || !changed {
		return err
	}
	if _, err := t.c.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(qurl),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNamePolicy): policy}}); err != nil {
		return fmt.Errorf("relay/sqs: letting topic %s send to queue %s (set queue_policy=false if the policy is managed elsewhere): %w", topicArn, qurl, err)
	}
	return nil
}

// fifoID returns s if it is a valid FIFO MessageGroupId or
// MessageDeduplicationId (1-128 printable ASCII characters without space),
// otherwise a stable hash of it of that form.
func fifoID(s string) string {
	ok := len(s) >= 1 && len(s) <= 128
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] >= 0x21 && s[i] <= 0x7e
	}
	if ok {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(h[:])
}
