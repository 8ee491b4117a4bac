package sqs

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// subDriver is the broker half of an sqs:// or sns:// subscriber.
type subDriver struct {
	endpoint

	noBatchVis atomic.Bool // the service lacks ChangeMessageVisibilityBatch
	noBatchDel atomic.Bool // the service lacks DeleteMessageBatch

	queueTopic queueBinding // the one topic of Config.Queue
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

func (d *subDriver) Close() error {
	d.c.close()
	return nil
}

// Provision implements driver.ProvisionDriver: it creates the queue (for
// sns://: the topic, the group's queue, its policy and the subscription).
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	if err := validateName(d.scheme, topic, d.cfg.FIFO); err != nil {
		return err
	}
	_, err := d.queueFor(ctx, topic)
	return err
}

// queueFor returns the URL of the queue this subscriber reads topic from.
func (d *subDriver) queueFor(ctx context.Context, topic string) (string, error) {
	if d.scheme == SchemeSNS {
		qname, err := d.queueName(topic)
		if err != nil {
			return "", err
		}
		return d.topo.groupQueue(ctx, topic, qname)
	}
	return d.topo.queueURL(ctx, topic)
}

func (d *subDriver) forget(topic string) {
	if d.scheme == SchemeSNS {
		if qname, err := d.queueName(topic); err == nil {
			d.topo.forgetGroup(topic, qname)
		}
	} else {
		d.topo.forgetQueue(topic)
	}
}

// Subscribe implements driver.SubscribeDriver: it provisions the queue.
func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	if err := validateName(d.scheme, topic, d.cfg.FIFO); err != nil {
		return nil, err
	}
	url, err := d.queueFor(ctx, topic)
	if err != nil {
		return nil, err
	}
	qname := topic
	if d.scheme == SchemeSNS {
		qname, _ = d.queueName(topic) // checked by queueFor
	}
	r := &receiver{d: d, topic: topic, fifo: isFIFO(qname), queueURL: url}
	r.attempts.Max = maxTrackedAttempts
	return r, nil
}

// RemoveTopic deletes the queue of topic on sqs:// (idempotent). On
// sns:// it returns relay.ErrNotSupported: the topic is shared by every
// group, and a group's queue is left with its subscription.
func (d *subDriver) RemoveTopic(ctx context.Context, topic string) error {
	if d.scheme == SchemeSNS {
		return relay.ErrNotSupported
	}
	if err := validateName(d.scheme, topic, d.cfg.FIFO); err != nil {
		return err
	}
	d.forget(topic)
	out, err := d.topo.c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(topic)})
	if err != nil {
		if isQueueMissing(err) {
			return nil
		}
		return fmt.Errorf("relay/sqs: finding queue %q: %w", topic, err)
	}
	if _, err := d.topo.c.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}); err != nil && !isQueueMissing(err) {
		return fmt.Errorf("relay/sqs: deleting queue %q: %w", topic, err)
	}
	return nil
}
