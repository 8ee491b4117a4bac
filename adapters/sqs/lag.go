package sqs

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-relay/relay"
)

// lagAttributes are the queue attributes Lag adds up.
var lagAttributes = []sqstypes.QueueAttributeName{
	sqstypes.QueueAttributeNameApproximateNumberOfMessages,
	sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// Lag implements driver.LagDriver: the messages in the queue this
// subscriber reads topic from (the queue topic for sqs://, the group's
// queue "<topic>-<group>" for sns://), from GetQueueAttributes:
// ApproximateNumberOfMessages (visible) + ApproximateNumberOfMessagesNotVisible
// (received and not yet deleted, including those a subscription holds)
// + ApproximateNumberOfMessagesDelayed. SQS's counts are approximate and
// trail sends and deletes by up to a minute. An attribute the service
// does not report counts 0; a service that reports no
// ApproximateNumberOfMessages makes Lag fail with an error wrapping
// relay.ErrNotSupported.
//
// Lag creates nothing: a queue that does not exist counts 0 (for sns://,
// nothing is delivered to a group before its queue is provisioned). It
// makes two requests: GetQueueUrl and GetQueueAttributes.
func (d *subDriver) Lag(ctx context.Context, topic string) (int64, error) {
	if err := validateName(d.scheme, topic, d.cfg.FIFO); err != nil {
		return 0, err
	}
	qname := topic
	if d.scheme == SchemeSNS {
		var err error
		if qname, err = d.queueName(topic); err != nil {
			return 0, err
		}
	}
	// Not the topology's URL cache: filling it here would let a later
	// Subscribe skip creating the queue with its configured attributes.
	u, err := d.c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(qname)})
	if err != nil {
		if urlMissing(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("relay/sqs: finding queue %q: %w", qname, err)
	}
	out, err := d.c.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl, AttributeNames: lagAttributes})
	if err != nil {
		if isQueueMissing(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("relay/sqs: reading the message counts of queue %q: %w", qname, err)
	}
	if _, ok := out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)]; !ok {
		return 0, fmt.Errorf("%w: the service reports no ApproximateNumberOfMessages for queue %q", relay.ErrNotSupported, qname)
	}
	var lag int64
	for _, a := range lagAttributes {
		v, ok := out.Attributes[string(a)]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("relay/sqs: queue %q reports %s %q, not a count", qname, a, v)
		}
		lag += n
	}
	return lag, nil
}

// urlMissing reports whether an error of GetQueueUrl says the queue does
// not exist, including goaws's answer (InvalidParameterValue: Lag
// validates the name first, so it cannot be otherwise invalid).
func urlMissing(err error) bool {
	if isQueueMissing(err) {
		return true
	}
	switch apiCode(err) {
	case "InvalidParameterValue", "AWS.SimpleQueueService.InvalidParameterValue":
		return true
	}
	return false
}
