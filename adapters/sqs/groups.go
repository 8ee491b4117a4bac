package sqs

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/go-relay/relay"
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
	if arn, ok := t.topics.cached(topic); ok {
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
