package sqs_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/go-relay/relay"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
)

// The benchmarks compare relay with the plain SDK doing the same work on
// the same service in the same run, and count HTTP calls per message:
//
//	go test -run '^$' -bench . -benchtime 3000x ./adapters/sqs
//
// publish: 100 messages per Publish call (relay) or per round of ten
// concurrent SendMessageBatch calls (SDK), each message a 256-byte body and
// an ID attribute. consume: a prefilled queue drained by 4 pollers with
// ReceiveMessage(10); relay acks each message (batched deletes), the SDK
// loop deletes each receive's messages with one DeleteMessageBatch.

const benchPayload = 256

func benchMessages(n int) []*relay.Message {
	msgs := make([]*relay.Message, n)
	body := make([]byte, benchPayload)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	for i := range msgs {
		msgs[i] = &relay.Message{ID: relay.NewID(), Payload: body}
	}
	return msgs
}

func benchConfig(t testing.TB) relaysqs.Config {
	s := service(t)
	cfg := relaysqs.Config{Region: s.Region, Endpoint: s.Endpoint}
	if s.Emulated {
		cfg.AccessKeyID, cfg.SecretAccessKey = "test", "test"
	}
	return cfg
}

func counting(c *callCounter) relaysqs.Option {
	return relaysqs.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
		c.next = rt
		return c
	})
}

func report(b *testing.B, n int, elapsed time.Duration, c *callCounter) {
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(c.total.Load())/float64(n), "calls/msg")
	b.Logf("%d messages in %v: %s", n, elapsed.Round(time.Millisecond), c)
}

// rawSendAll sends msgs with SendMessageBatch, rounds of up to ten
// concurrent calls of ten entries: what relay does for a 100-message Publish.
func rawSendAll(ctx context.Context, q *sqs.Client, url string, msgs []*relay.Message) error {
	for start := 0; start < len(msgs); start += 100 {
		round := msgs[start:min(start+100, len(msgs))]
		var wg sync.WaitGroup
		errs := make(chan error, 10)
		for lo := 0; lo < len(round); lo += 10 {
			part := round[lo:min(lo+10, len(round))]
			wg.Add(1)
			go func() {
				defer wg.Done()
				entries := make([]sqstypes.SendMessageBatchRequestEntry, len(part))
				for i, m := range part {
					entries[i] = sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(m.Payload)),
						MessageAttributes: map[string]sqstypes.MessageAttributeValue{"id": {DataType: aws.String("String"), StringValue: aws.String(m.ID)}}}
				}
				out, err := q.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err == nil && len(out.Failed) > 0 {
					err = fmt.Errorf("%d entries failed", len(out.Failed))
				}
				if err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// benchTransport is the SDK loop's HTTP transport, tuned like relay's
// (enough idle connections for its concurrent calls).
func benchTransport(b *testing.B) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	b.Cleanup(tr.CloseIdleConnections)
	return tr
}

func createQueue(b *testing.B, q *sqs.Client, name string) string {
	out, err := q.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		b.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

func BenchmarkSQS(b *testing.B) {
	ctx := context.Background()

	b.Run("publish/relay", func(b *testing.B) {
		c := newCallCounter(nil)
		pub, err := relaysqs.NewSQSPublisher(ctx, benchConfig(b), counting(c))
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		topic := name("bench")
		if err := pub.Publish(ctx, topic, relay.NewMessage([]byte("create"))); err != nil {
			b.Fatal(err)
		}
		msgs := benchMessages(b.N)
		c.reset()
		b.ResetTimer()
		start := time.Now()
		for lo := 0; lo < len(msgs); lo += 100 {
			if err := pub.Publish(ctx, topic, msgs[lo:min(lo+100, len(msgs))]...); err != nil {
				b.Fatal(err)
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		report(b, b.N, elapsed, c)
	})

	b.Run("publish/sdk", func(b *testing.B) {
		c := newCallCounter(benchTransport(b))
		q, _ := rawClients(b, nil)
		url := createQueue(b, q, name("bench"))
		cq, _ := rawClients(b, c)
		msgs := benchMessages(b.N)
		b.ResetTimer()
		start := time.Now()
		if err := rawSendAll(ctx, cq, url, msgs); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		report(b, b.N, elapsed, c)
	})

	b.Run("consume/relay", func(b *testing.B) {
		q, _ := rawClients(b, nil)
		topic := name("bench")
		url := createQueue(b, q, topic)
		if err := rawSendAll(ctx, q, url, benchMessages(b.N)); err != nil {
			b.Fatal(err)
		}
		c := newCallCounter(nil)
		sub, err := relaysqs.NewSQSSubscriber(ctx, benchConfig(b), counting(c))
		if err != nil {
			b.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		b.ResetTimer()
		start := time.Now()
		ch, err := sub.Subscribe(sctx, topic)
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			m := <-ch
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		if err := sub.Close(); err != nil { // flushes the last deletes
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		report(b, b.N, elapsed, c)
		left, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
		if err != nil || len(left.Messages) != 0 {
			b.Errorf("after every message was acked the queue still has messages (%v)", err)
		}
	})

	b.Run("consume/sdk", func(b *testing.B) {
		q, _ := rawClients(b, nil)
		url := createQueue(b, q, name("bench"))
		if err := rawSendAll(ctx, q, url, benchMessages(b.N)); err != nil {
			b.Fatal(err)
		}
		c := newCallCounter(benchTransport(b))
		cq, _ := rawClients(b, c)
		var got atomic.Int64
		var wg sync.WaitGroup
		pctx, stop := context.WithCancel(ctx) // like relay's Close: ends the long polls once all is consumed
		defer stop()
		b.ResetTimer()
		start := time.Now()
		for range relaysqs.DefaultPollers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for got.Load() < int64(b.N) {
					out, err := cq.ReceiveMessage(pctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
						WaitTimeSeconds: 20, VisibilityTimeout: 30, MessageAttributeNames: []string{"All"},
						MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
					if err != nil {
						if pctx.Err() == nil {
							b.Error(err)
						}
						return
					}
					if len(out.Messages) == 0 {
						continue
					}
					entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(out.Messages))
					for i, m := range out.Messages {
						entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
					}
					if _, err := cq.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
						b.Error(err)
						return
					}
					if got.Add(int64(len(out.Messages))) >= int64(b.N) {
						stop()
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		b.StopTimer()
		report(b, b.N, elapsed, c)
	})
}
