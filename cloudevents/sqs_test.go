package cloudevents_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/go-relay/relay"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/cloudevents"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestSQSAttributeRoom reads with the plain AWS SDK what the Generic
// binding puts on SQS: an event with text data, no partitionkey and nine
// attributes has each of them as a message attribute of its own (with
// _relay.id, the ten SQS allows) and the values as sent (percent-encoded
// where needed); one attribute more and the adapter packs what does not
// fit into _relay.md, staying within ten.
func TestSQSAttributeRoom(t *testing.T) {
	pubURL, subURL := sqsURL(t), sqsURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := "ce-room-" + suffix()
	pub, err := relay.OpenPublisher(ctx, pubURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := relay.OpenSubscriber(ctx, subURL)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	relaytest.Provision(t, sub.(relay.Provisioner), topic) // creates the queue; the raw client reads it

	nine := &cloudevents.Event{ID: "nine-" + suffix(), Source: "/s", Type: "t.nine", Subject: "a b",
		Time: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), DataContentType: "text/plain",
		DataSchema: "urn:s", Extensions: map[string]string{"e1": "1", "e2": "2"}, Data: []byte("text")}
	ten := &cloudevents.Event{ID: "ten-" + suffix(), Source: "/s", Type: "t.ten", Subject: "a b",
		Time: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), DataContentType: "text/plain",
		DataSchema: "urn:s", Extensions: map[string]string{"e1": "1", "e2": "2", "e3": "3"}, Data: []byte("text")}
	cp := cloudevents.NewPublisher(pub)
	if err := cp.Publish(ctx, topic, nine); err != nil {
		t.Fatal(err)
	}
	if err := cp.Publish(ctx, topic, ten); err != nil {
		t.Fatal(err)
	}

	q := rawSQS(t)
	qurl, err := q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(topic)})
	if err != nil {
		t.Fatal(err)
	}
	attrs := map[string]map[string]string{} // by _relay.id
	for len(attrs) < 2 && ctx.Err() == nil {
		out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: qurl.QueueUrl,
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			a := map[string]string{}
			for k, v := range m.MessageAttributes {
				a[k] = aws.ToString(v.StringValue)
			}
			attrs[a[relaysqs.AttrID]] = a
			_, _ = q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: qurl.QueueUrl, ReceiptHandle: m.ReceiptHandle})
		}
	}
	n, tn := attrs[nine.ID], attrs[ten.ID]
	if n == nil || tn == nil {
		t.Fatalf("received %v", attrs)
	}
	want := map[string]string{relaysqs.AttrID: nine.ID, "ce-specversion": "1.0", "ce-source": "/s",
		"ce-type": "t.nine", "ce-subject": "a%20b", "ce-time": "2026-12-01T00:00:00Z",
		"ce-datacontenttype": "text/plain", "ce-dataschema": "urn:s", "ce-e1": "1", "ce-e2": "2"}
	if len(n) != len(want) {
		t.Errorf("nine attributes: %d on the wire, want %d: %v", len(n), len(want), n)
	}
	for k, v := range want {
		if n[k] != v {
			t.Errorf("nine attributes: %s = %q, want %q", k, n[k], v)
		}
	}
	if len(tn) > relaysqs.MaxAttributes {
		t.Errorf("ten attributes: %d on the wire, SQS allows %d", len(tn), relaysqs.MaxAttributes)
	}
	if _, ok := tn[relaysqs.AttrPacked]; !ok {
		t.Errorf("ten attributes: no %s: %v", relaysqs.AttrPacked, tn)
	}
	for k := range tn {
		if !strings.HasPrefix(k, "ce-") && !strings.HasPrefix(k, "_relay.") {
			t.Errorf("unexpected attribute %s", k)
		}
	}
}

func rawSQS(t *testing.T) *sqs.Client {
	t.Helper()
	var opts []func(*config.LoadOptions) error
	opts = append(opts, config.WithRegion(sqsSvc.Region))
	if sqsSvc.Emulated {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	cfg.HTTPClient = &http.Client{Transport: tr}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if sqsSvc.Endpoint != "" {
			o.BaseEndpoint = aws.String(sqsSvc.Endpoint)
		}
	})
}
