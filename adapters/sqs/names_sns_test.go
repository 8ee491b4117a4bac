package sqs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/go-relay/relay"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// A topic and a group named by UUIDs (as test suites do) give a group
// queue name longer than SQS's 80 characters: the adapter uses the
// shortened name, and the round trip works.
func TestLongTopicAndGroupNames(t *testing.T) {
	topic, group := "relay-test-"+relay.NewID(), relay.NewID()
	if n := len(topic) + 1 + len(group); n <= relaysqs.MaxQueueName {
		t.Fatalf("names too short for this test: %d characters", n)
	}
	pub := relaytest.OpenPublisher(t, baseURL(t, "sns"))
	sub := relaytest.OpenSubscriber(t, baseURL(t, "sns", "group="+group))
	provision(t, sub, topic)
	msg := relay.NewMessage([]byte("long names"))
	relaytest.Publish(t, pub, topic, msg)
	m := relaytest.Next(t, subscribe(t, sub, topic), "message on long names")
	if m.ID != msg.ID || string(m.Payload) != "long names" {
		t.Errorf("got %s %q, want %s", m.ID, m.Payload, msg.ID)
	}
	_ = m.Ack()

	want := relaysqs.ShortenName(topic+"-"+group, relaysqs.MaxQueueName)
	if len(want) != relaysqs.MaxQueueName || !strings.HasPrefix(want, topic) {
		t.Errorf("derived queue name %q", want)
	}
	rq, _ := rawClients(t, nil)
	if _, err := rq.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(want)}); err != nil {
		t.Errorf("the derived queue %q does not exist: %v", want, err)
	}
}

// queue= names the group queue; the derived name is not created. The
// subscriber serves that one topic only.
func TestExplicitGroupQueue(t *testing.T) {
	ctx := context.Background()
	topic, queue := name("explicit"), name("myqueue")
	pub := relaytest.OpenPublisher(t, baseURL(t, "sns", "queue=ignored-by-publishers"))
	sub := relaytest.OpenSubscriber(t, baseURL(t, "sns", "group=g", "queue="+queue))
	provision(t, sub, topic)
	msg := relay.NewMessage([]byte("to my queue"))
	relaytest.Publish(t, pub, topic, msg)
	m := relaytest.Next(t, subscribe(t, sub, topic), "message on the explicit queue")
	if m.ID != msg.ID {
		t.Errorf("got %s, want %s", m.ID, msg.ID)
	}
	_ = m.Ack()
	rq, _ := rawClients(t, nil)
	if _, err := rq.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue)}); err != nil {
		t.Errorf("queue %q does not exist: %v", queue, err)
	}
	if _, err := rq.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(topic + "-g")}); err == nil {
		t.Errorf("the derived queue %s-g was created too", topic)
	}
	if err := sub.(relay.Provisioner).Provision(ctx, name("other")); !errors.Is(err, relay.ErrInvalidTopic) {
		t.Errorf("a second topic on queue=: %v, want ErrInvalidTopic", err)
	}
	if _, err := relay.OpenSubscriber(ctx, baseURL(t, "sqs", "queue="+queue)); err == nil {
		t.Error("sqs:// accepted queue=")
	}
}

// A relay topic longer than SNS's 256 characters maps to a shortened SNS
// topic, and round-trips.
func TestLongSNSTopicName(t *testing.T) {
	topic := name("long") + "-" + strings.Repeat("x", 260)
	pub := relaytest.OpenPublisher(t, baseURL(t, "sns"))
	sub := relaytest.OpenSubscriber(t, baseURL(t, "sns", "group=g"))
	provision(t, sub, topic)
	msg := relay.NewMessage([]byte("long topic"))
	relaytest.Publish(t, pub, topic, msg)
	m := relaytest.Next(t, subscribe(t, sub, topic), "message on a long topic")
	if m.ID != msg.ID || m.Topic() != topic {
		t.Errorf("got %s on %q, want %s on the relay topic", m.ID, m.Topic(), msg.ID)
	}
	_ = m.Ack()
}
