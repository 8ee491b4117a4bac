package sqs_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
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
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// The benchmarks compare relay with the plain SDK doing the same work on
// the same service in the same run, and count HTTP calls per message:
//
//	go test -run '^$' -bench . -benchtime 5000x ./adapters/sqs
//
// Relay and the SDK alternate in rounds of 500 messages, so both see the
// same machine load (the emulator shares the cores); each side's time is
// summed over its rounds. publish: 100 messages per Publish call (relay) or
// per round of ten concurrent SendMessageBatch calls (SDK), each message a
// 256-byte body and an ID attribute. consume: a prefilled queue drained by
// 4 pollers with ReceiveMessage(10); relay acks each message (deletes
// batched by the shared settlement layer) and a round ends when its subscription's
// channel has closed; the SDK loop deletes each receive's messages with
// one DeleteMessageBatch before it receives again.

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

// side is one contender's accumulated time, messages and calls.
type side struct {
	name    string
	elapsed time.Duration
	n       int
	calls   *callCounter
}

func report(b *testing.B, relaySide, sdkSide *side) {
	for _, s := range []*side{relaySide, sdkSide} {
		b.ReportMetric(float64(s.n)/s.elapsed.Seconds(), s.name+"-msgs/s")
		b.ReportMetric(float64(s.calls.total.Load())/float64(s.n), s.name+"-calls/msg")
		b.Logf("%s: %d messages in %v: %s", s.name, s.n, s.elapsed.Round(time.Millisecond), s.calls)
	}
	ratio := (float64(relaySide.n) / relaySide.elapsed.Seconds()) / (float64(sdkSide.n) / sdkSide.elapsed.Seconds())
	b.ReportMetric(ratio, "relay/sdk")
}

const benchRound = 500

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
	q, _ := rawClients(b, nil)

	b.Run("publish", func(b *testing.B) {
		rs := &side{name: "relay", calls: newCallCounter(nil)}
		ss := &side{name: "sdk", calls: newCallCounter(benchTransport(b))}
		pub, err := relaysqs.NewSQSPublisher(ctx, benchConfig(b), counting(rs.calls))
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		cq, _ := rawClients(b, ss.calls)
		topic, sdkTopic := name("bench"), name("bench")
		if err := pub.Publish(ctx, topic, relay.NewMessage([]byte("create"))); err != nil {
			b.Fatal(err)
		}
		sdkURL := createQueue(b, q, sdkTopic)
		defer deleteQueues(q, topic, sdkTopic)
		rs.calls.reset()
		b.ResetTimer()
		for done := 0; done < b.N; done += benchRound {
			n := min(benchRound, b.N-done)
			msgs := benchMessages(n)
			start := time.Now()
			for lo := 0; lo < n; lo += 100 {
				if err := pub.Publish(ctx, topic, msgs[lo:min(lo+100, n)]...); err != nil {
					b.Fatal(err)
				}
			}
			rs.elapsed += time.Since(start)
			rs.n += n
			msgs = benchMessages(n)
			start = time.Now()
			if err := rawSendAll(ctx, cq, sdkURL, msgs); err != nil {
				b.Fatal(err)
			}
			ss.elapsed += time.Since(start)
			ss.n += n
		}
		b.StopTimer()
		report(b, rs, ss)
	})

	b.Run("consume", func(b *testing.B) {
		rs := &side{name: "relay", calls: newCallCounter(nil)}
		ss := &side{name: "sdk", calls: newCallCounter(benchTransport(b))}
		cq, _ := rawClients(b, ss.calls)
		topic, sdkTopic := name("bench"), name("bench")
		url, sdkURL := createQueue(b, q, topic), createQueue(b, q, sdkTopic)
		defer deleteQueues(q, topic, sdkTopic)
		sub, err := relaysqs.NewSQSSubscriber(ctx, benchConfig(b), counting(rs.calls))
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		b.ResetTimer()
		for done := 0; done < b.N; done += benchRound {
			n := min(benchRound, b.N-done)
			b.StopTimer()
			if err := rawSendAll(ctx, q, url, benchMessages(n)); err != nil {
				b.Fatal(err)
			}
			if err := rawSendAll(ctx, q, sdkURL, benchMessages(n)); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			rs.elapsed += relaytest.ConsumeSettled(b, sub, topic, n)
			rs.n += n
			ss.elapsed += sdkConsume(b, ctx, cq, sdkURL, n)
			ss.n += n
		}
		b.StopTimer()
		report(b, rs, ss)
		left, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
		if err != nil || len(left.Messages) != 0 {
			b.Errorf("after every message was acked the relay queue still has messages (%v)", err)
		}
	})
}

// sdkConsume drains n messages with 4 pollers doing ReceiveMessage(10)
// then DeleteMessageBatch, as a hand-written consumer would.
func sdkConsume(b *testing.B, ctx context.Context, cq *sqs.Client, url string, n int) time.Duration {
	var got atomic.Int64
	var wg sync.WaitGroup
	pctx, stop := context.WithCancel(ctx) // like relay's Close: ends the long polls once all is consumed
	defer stop()
	start := time.Now()
	for range relaysqs.DefaultPollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for got.Load() < int64(n) {
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
				if got.Add(int64(len(out.Messages))) >= int64(n) {
					stop()
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// deleteQueues removes benchmark queues, keeping the emulator lean.
func deleteQueues(q *sqs.Client, names ...string) {
	for _, n := range names {
		if out, err := q.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(n)}); err == nil {
			_, _ = q.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
		}
	}
}

// BenchmarkLatency measures one message in flight (publish, receive, ack,
// repeat) on a queue through relay and through the SDK doing the same
// work (SendMessage with an ID attribute; ReceiveMessage of one with a
// long-poll wait; DeleteMessage), idle and under a steady load of 2,000
// msg/s on another queue:
//
//	go test -run '^$' -bench Latency -benchtime 2000x ./adapters/sqs/
func BenchmarkLatency(b *testing.B) {
	q, _ := rawClients(b, nil)
	h := drivertest.Harness{
		NewTopic: func(testing.TB) string {
			topic := name("latency")
			b.Cleanup(func() { deleteQueues(q, topic) })
			return topic
		},
		NewPublisher: func(t testing.TB) relay.Publisher { return relaytest.OpenPublisher(t, baseURL(t, relaysqs.SchemeSQS)) },
		NewSubscriber: func(t testing.TB, _ string) relay.Subscriber {
			return relaytest.OpenSubscriber(t, baseURL(t, relaysqs.SchemeSQS))
		},
	}
	raw := func(b *testing.B, topic string) (drivertest.RoundTrip, func()) {
		cq, _ := rawClients(b, nil)
		url := createQueue(b, cq, topic)
		body := string(make([]byte, 100))
		rt := func(ctx context.Context) error {
			id := relay.NewID()
			if _, err := cq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body),
				MessageAttributes: map[string]sqstypes.MessageAttributeValue{"id": {DataType: aws.String("String"), StringValue: aws.String(id)}}}); err != nil {
				return err
			}
			for {
				out, err := cq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1,
					WaitTimeSeconds: 20, VisibilityTimeout: 30, MessageAttributeNames: []string{"All"},
					MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
				if err != nil {
					return err
				}
				if len(out.Messages) == 0 {
					continue
				}
				m := out.Messages[0]
				if got := aws.ToString(m.MessageAttributes["id"].StringValue); got != id {
					return fmt.Errorf("received %s, want %s", got, id)
				}
				_, err = cq.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
				return err
			}
		}
		return rt, func() {}
	}
	if os.Getenv("RELAY_BENCH_SQS_RAW") == "longpoll" {
		raw = rawLongPollLoop
	}
	drivertest.BenchmarkLatency(b, h, raw, drivertest.LatencyOptions{})
}

// rawLongPollLoop is the SDK loop receiving the way relay does: 4 pollers
// long-poll the queue (ReceiveMessage of up to 10, 20s wait) all along, so
// that a message is sent while they wait; the round trip sends, takes the
// message from them and deletes it. RELAY_BENCH_SQS_RAW=longpoll makes it
// BenchmarkLatency's raw side, to tell the service's long-poll wake-up
// (goaws looks for messages every 100ms) from relay's own cost.
func rawLongPollLoop(b *testing.B, topic string) (drivertest.RoundTrip, func()) {
	cq, _ := rawClients(b, nil)
	url := createQueue(b, cq, topic)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan sqstypes.Message, 100)
	var wg sync.WaitGroup
	for range relaysqs.DefaultPollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				out, err := cq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
					WaitTimeSeconds: 20, VisibilityTimeout: 30, MessageAttributeNames: []string{"All"},
					MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
				if err != nil {
					continue
				}
				for _, m := range out.Messages {
					got <- m
				}
			}
		}()
	}
	body := string(make([]byte, 100))
	rt := func(ctx context.Context) error {
		id := relay.NewID()
		if _, err := cq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{"id": {DataType: aws.String("String"), StringValue: aws.String(id)}}}); err != nil {
			return err
		}
		select {
		case m := <-got:
			if rid := aws.ToString(m.MessageAttributes["id"].StringValue); rid != id {
				return fmt.Errorf("received %s, want %s", rid, id)
			}
			_, err := cq.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return rt, func() { cancel(); wg.Wait() }
}
