package sqs

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// CheckGroups implements driver.GroupCheckDriver. On sqs:// it is nil:
// the queue is the group, and the publisher creates it. On sns:// SNS
// delivers a message only to the subscriptions its topic has when it is
// published, so a topic that does not exist, or has no confirmed
// subscription (a group's queue, or any other endpoint), is a
// *relay.NoGroupError. It creates nothing: the topic's ARN comes from
// this publisher's cache, from account= (create_topics=false), or from
// ListTopics; then ListSubscriptionsByTopic counts its subscriptions.
func (d *pubDriver) CheckGroups(ctx context.Context, topic string) error {
	if d.scheme != SchemeSNS {
		return nil
	}
	name := snsTopicName(topic)
	noGroup := func(detail string) error {
		return &relay.NoGroupError{Backend: SchemeSNS, Topic: topic, Detail: detail}
	}
	arn, found, err := d.topo.findTopicArn(ctx, topic)
	if err != nil {
		return err
	}
	if !found {
		return noGroup(fmt.Sprintf("SNS topic %q does not exist", name))
	}
	confirmed, pending := 0, 0
	p := sns.NewListSubscriptionsByTopicPaginator(d.c.sns, &sns.ListSubscriptionsByTopicInput{TopicArn: aws.String(arn)})
	for p.HasMorePages() && confirmed == 0 {
		page, err := p.NextPage(ctx)
		if isTopicMissing(err) {
			return noGroup(fmt.Sprintf("SNS topic %q does not exist", name))
		}
		if err != nil {
			return fmt.Errorf("relay/sqs: listing the subscriptions of SNS topic %q: %w", name, err)
		}
		for _, s := range page.Subscriptions {
			switch aws.ToString(s.SubscriptionArn) {
			case "PendingConfirmation":
				pending++
			case "Deleted":
			default:
				confirmed++
			}
		}
	}
	switch {
	case confirmed > 0:
		return nil
	case pending > 0:
		return noGroup(fmt.Sprintf("SNS topic %q has %d subscription(s), all pending confirmation", name, pending))
	}
	return noGroup(fmt.Sprintf("SNS topic %q has no subscription", name))
}

// findTopicArn returns the ARN of the SNS topic of relay topic topic
// without creating it: from the cache or existingTopicArn.
func (t *topology) findTopicArn(ctx context.Context, topic string) (arn string, found bool, err error) {
	if arn, ok := t.topics.Cached(topic); ok {
		return arn, true, nil
	}
	return t.existingTopicArn(ctx, snsTopicName(topic))
}

// existingTopicArn returns the ARN of SNS topic name: built from Account
// when it is set (found then means only that: the next call on it tells
// whether it exists), else looked up with ListTopics, which found false
// means it does not list.
func (t *topology) existingTopicArn(ctx context.Context, name string) (arn string, found bool, err error) {
	if t.cfg.Account != "" {
		return fmt.Sprintf("arn:%s:sns:%s:%s:%s", t.c.partition, t.c.region, t.cfg.Account, name), true, nil
	}
	p := sns.NewListTopicsPaginator(t.c.sns, &sns.ListTopicsInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return "", false, fmt.Errorf("relay/sqs: listing SNS topics to find %q: %w", name, err)
		}
		for _, tp := range page.Topics {
			if a := aws.ToString(tp.TopicArn); strings.HasSuffix(a, ":"+name) {
				return a, true, nil
			}
		}
	}
	return "", false, nil
}

// SendBatchToGroup implements driver.GroupSendDriver on sns://: msgs go
// straight to group's queue (groupQueueName: "<topic>-<group>", the queue
// a subscriber without queue= uses), sent as SQS messages in the form
// that raw SNS delivery gives them, so the group's subscriber reads them
// as it reads what the topic delivers; the topic's other subscriptions
// get nothing. The queue must exist (a group provisioned or subscribed
// once): a missing one is a *relay.NoGroupError, and nothing is created.
// A group whose subscriber names its queue with queue= cannot be reached
// this way. sqs:// has no groups: relay.ErrNotSupported.
func (d *pubDriver) SendBatchToGroup(ctx context.Context, topic, group string, msgs []*relay.Message) error {
	if d.scheme != SchemeSNS {
		return fmt.Errorf("%w: sqs:// has no groups (the queue is the group): publish to it", relay.ErrNotSupported)
	}
	name := groupQueueName(topic, group)
	out, err := d.c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	switch {
	case isQueueMissing(err):
		return &relay.NoGroupError{Backend: SchemeSNS, Topic: topic, Group: group, Detail: fmt.Sprintf("no SQS queue %q", name)}
	case err != nil:
		d.noteCall(err)
		if isTransient(err) {
			return driver.Retryable(fmt.Errorf("relay/sqs: finding queue %q of group %q: %w", name, group, err))
		}
		return fmt.Errorf("relay/sqs: finding queue %q of group %q: %w", name, group, err)
	}
	url := aws.ToString(out.QueueUrl)
	api := sqsPublishAPI(d.c, d.topo)
	api.dest = func(context.Context, string) (string, error) { return url, nil }
	api.forget = func(string) {}
	q := &pubDriver{endpoint: d.endpoint, api: api}
	q.noBatch.Store(d.noBatch.Load())
	return q.SendAll(ctx, name, msgs)
}
