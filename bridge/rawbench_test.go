package bridge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The raw client libraries doing a bridge's two halves on the same
// brokers as BenchmarkRoute, for its ratio-raw: each consumes a backlog
// that relay published (fill) with the bridge's default window, and
// publishes benchMessages in batches of 100 from 4 goroutines (what
// measurePublish(…, 100, 4) does with relay). Names on the wire are
// relay's defaults (no prefixes): the Redis stream is the topic; the AMQP
// exchange is the topic and a group's queue "<topic>.<group>"; the Kafka
// topic is the topic; the SQS queue (sqs://) is the topic.

// rawGroup is the group (queue, consumer group) the raw consumers read as.
const rawGroup = "raw"

// rawResult is one raw measurement: its rate, for SQS how many HTTP
// calls it made (-1 otherwise), and the machine's busy CPU time over the
// timed part (machineBusy): a drain's from its first message on, as its
// rate.
type rawResult struct {
	rate  float64
	calls int64
	busy  time.Duration
}

type rawBackend interface {
	// prepare readies topic for a raw consumer of group, before relay
	// fills it.
	prepare(b *testing.B, topic, group string)
	// consume drains the benchMessages of topic's backlog as group with at
	// most window messages unacknowledged.
	consume(b *testing.B, topic, group string, window int) rawResult
	// publish publishes benchMessages to topic (made routable and kept by
	// relay's Provision) in batches of batch from workers goroutines.
	publish(b *testing.B, topic string, batch, workers int) rawResult
	// drop deletes topic and the queues of groups, where the broker keeps
	// them (Redis, RabbitMQ, SQS), so that the run leaves nothing behind.
	drop(topic string, groups ...string)
}

// measureRawConsume returns the raw client's rate of consuming a backlog
// of benchMessages that relay published, with the bridge's default window.
func measureRawConsume(b *testing.B, be benchBackend) rawResult {
	topic := "bench-rc-" + benchID()
	defer be.raw.drop(topic, rawGroup)
	be.raw.prepare(b, topic, rawGroup)
	fill(b, be, topic)
	return be.raw.consume(b, topic, rawGroup, bridge.DefaultSourceWindow(be.subURL(rawGroup)))
}

// measureRawPublish returns the raw client's rate of publishing
// benchMessages in batches of 100 from 4 goroutines.
func measureRawPublish(b *testing.B, be benchBackend) rawResult {
	topic := "bench-rp-" + benchID()
	defer be.raw.drop(topic, "g")
	sub := provisioned(b, be, topic, "g") // so that the messages are kept (and routable)
	_ = sub.Close()
	busy := machineBusy()
	r := be.raw.publish(b, topic, 100, 4)
	r.busy = machineBusy() - busy
	return r
}

// runParallel splits benchMessages into batches of batch taken by workers
// goroutines, each calling send(n) for a batch of n; it returns the rate.
func runParallel(b *testing.B, batch, workers int, send func(n int) error) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := next.Add(int64(batch)) - int64(batch)
				if lo >= int64(benchMessages) {
					return
				}
				if err := send(int(min(int64(batch), int64(benchMessages)-lo))); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(benchMessages) / time.Since(start).Seconds()
}

// drainRate is the rate of a drain whose clock started when the first
// batch, of first messages, arrived (as relay's measureConsume starts at
// its first message: joining a Kafka group is not counted).
func drainRate(got, first int, start time.Time) float64 {
	return float64(got-first) / time.Since(start).Seconds()
}

// --- Redis: go-redis v9 ---

type rawRedis struct{ c *redis.Client }

func newRawRedis(b *testing.B, relayURL string) *rawRedis {
	u, err := url.Parse(relayURL)
	if err != nil {
		b.Fatal(err)
	}
	u.RawQuery = "" // relay's own parameters
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		b.Fatal(err)
	}
	opts.PoolSize = 16
	c := redis.NewClient(opts)
	b.Cleanup(func() { _ = c.Close() })
	return &rawRedis{c}
}

// prepare creates the group at "0", so that it reads the whole stream.
func (r *rawRedis) prepare(b *testing.B, topic, group string) {
	if err := r.c.XGroupCreateMkStream(context.Background(), topic, group, "0").Err(); err != nil {
		b.Fatal(err)
	}
}

// consume: XREADGROUP COUNT window, then one XACK of the batch.
func (r *rawRedis) consume(b *testing.B, topic, group string, window int) rawResult {
	ctx := context.Background()
	ids := make([]string, 0, window)
	var start time.Time
	var busy time.Duration // machineBusy at start
	got, first := 0, 0
	for got < benchMessages {
		res, err := r.c.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: "raw", Streams: []string{topic, ">"}, Count: int64(window), Block: 5 * time.Second,
		}).Result()
		if err != nil {
			b.Fatalf("XREADGROUP after %d of %d: %v", got, benchMessages, err)
		}
		ids = ids[:0]
		for _, m := range res[0].Messages {
			if p, _ := m.Values[redisstream.FieldPayload].(string); len(p) != benchPayload {
				b.Fatalf("entry %s: payload of %d bytes, want %d", m.ID, len(p), benchPayload)
			}
			ids = append(ids, m.ID)
		}
		if got == 0 {
			start, first, busy = time.Now(), len(ids), machineBusy()
		}
		if err := r.c.XAck(ctx, topic, group, ids...).Err(); err != nil {
			b.Fatal(err)
		}
		got += len(ids)
	}
	return rawResult{rate: drainRate(got, first, start), calls: -1, busy: machineBusy() - busy}
}

// publish: one pipeline of batch XADDs (ID and payload fields, as relay
// writes them) per batch.
func (r *rawRedis) publish(b *testing.B, topic string, batch, workers int) rawResult {
	ctx := context.Background()
	payload := make([]byte, benchPayload)
	rate := runParallel(b, batch, workers, func(n int) error {
		cmds, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for range n {
				p.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []any{redisstream.FieldID, relay.NewID(), redisstream.FieldPayload, payload}})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, c := range cmds {
			if c.Err() != nil {
				return c.Err()
			}
		}
		return nil
	})
	return rawResult{rate: rate, calls: -1}
}

func (r *rawRedis) drop(topic string, _ ...string) { r.c.Del(context.Background(), topic) }

// --- RabbitMQ: amqp091-go ---

type rawAMQP struct {
	url  string
	conn *amqp091.Connection
}

func newRawAMQP(b *testing.B, relayURL string) *rawAMQP {
	u, err := url.Parse(relayURL)
	if err != nil {
		b.Fatal(err)
	}
	u.RawQuery = ""
	conn, err := amqp091.Dial(u.String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return &rawAMQP{url: relayURL, conn: conn}
}

func (r *rawAMQP) channel(b *testing.B) *amqp091.Channel {
	ch, err := r.conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	return ch
}

// prepare lets relay declare the topic's exchange and the group's queue
// "<topic>.<group>" (bound to it), which relay's publisher then fills.
func (r *rawAMQP) prepare(b *testing.B, topic, group string) {
	sub := provisioned(b, benchBackend{pubURL: r.url, subURL: withGroup(r.url)}, topic, group)
	_ = sub.Close()
}

// consume: Qos(prefetch = window), manual acks, one multiple ack per
// burst: every delivery already buffered (at most the window) is taken,
// then the last of them is acked with multiple=true.
func (r *rawAMQP) consume(b *testing.B, topic, group string, window int) rawResult {
	ch := r.channel(b)
	defer ch.Close()
	if err := ch.Qos(window, 0, false); err != nil {
		b.Fatal(err)
	}
	dels, err := ch.Consume(topic+"."+group, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	next := func() amqp091.Delivery {
		select {
		case d, ok := <-dels:
			if !ok {
				b.Fatal("deliveries closed")
			}
			return d
		case <-time.After(time.Minute):
			b.Fatal("no delivery for a minute")
		}
		panic("unreachable")
	}
	var start time.Time
	var busy time.Duration // machineBusy at start
	got, first := 0, 0
	for got < benchMessages {
		last := next()
		n := 1
	burst:
		for n < window && got+n < benchMessages {
			select {
			case d, ok := <-dels:
				if !ok {
					b.Fatal("deliveries closed")
				}
				last, n = d, n+1
			default:
				break burst
			}
		}
		if len(last.Body) != benchPayload {
			b.Fatalf("delivery of %d bytes, want %d", len(last.Body), benchPayload)
		}
		if got == 0 {
			start, first, busy = time.Now(), n, machineBusy()
		}
		if err := last.Ack(true); err != nil {
			b.Fatal(err)
		}
		got += n
	}
	return rawResult{rate: drainRate(got, first, start), calls: -1, busy: machineBusy() - busy}
}

// publish: each worker has its own channel in confirm mode and publishes
// a batch of persistent, mandatory messages, then waits for the batch's
// confirms.
func (r *rawAMQP) publish(b *testing.B, topic string, batch, workers int) rawResult {
	chans := make(chan *amqp091.Channel, workers)
	type confirmed struct {
		confirms <-chan amqp091.Confirmation
		returns  <-chan amqp091.Return
	}
	notify := map[*amqp091.Channel]confirmed{}
	for range workers {
		ch := r.channel(b)
		defer ch.Close()
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		notify[ch] = confirmed{ch.NotifyPublish(make(chan amqp091.Confirmation, batch)), ch.NotifyReturn(make(chan amqp091.Return, batch))}
		chans <- ch
	}
	body := make([]byte, benchPayload)
	rate := runParallel(b, batch, workers, func(n int) error {
		ch := <-chans
		defer func() { chans <- ch }()
		c := notify[ch]
		for range n {
			if err := ch.Publish(topic, "", true, false, amqp091.Publishing{
				MessageId: relay.NewID(), DeliveryMode: amqp091.Persistent, Body: body,
			}); err != nil {
				return err
			}
		}
		for range n {
			select {
			case conf := <-c.confirms:
				if !conf.Ack {
					return errors.New("nack")
				}
			case ret := <-c.returns:
				return fmt.Errorf("returned: %s", ret.ReplyText)
			}
		}
		return nil
	})
	return rawResult{rate: rate, calls: -1}
}

func (r *rawAMQP) drop(topic string, groups ...string) {
	ch, err := r.conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, g := range groups {
		_, _ = ch.QueueDelete(topic+"."+g, false, false, false)
	}
	_ = ch.ExchangeDelete(topic, false, false)
}

// --- Kafka: franz-go ---

type rawKafka struct{ brokers []string }

func newRawKafka(b *testing.B, relayURL string) *rawKafka {
	u, err := url.Parse(relayURL)
	if err != nil {
		b.Fatal(err)
	}
	return &rawKafka{strings.Split(u.Host, ",")}
}

// prepare lets relay create the topic (with the cluster's default
// partitions, as relay's publisher would).
func (r *rawKafka) prepare(b *testing.B, topic, _ string) {
	k := "kafka://" + strings.Join(r.brokers, ",")
	sub := provisioned(b, benchBackend{pubURL: k, subURL: withGroup(k)}, topic, "provision")
	_ = sub.Close()
}

// consume: a new group member (offsets from the start), PollRecords of at
// most window records, CommitUncommittedOffsets after each poll. Fetch
// sizes are franz-go's defaults; heartbeats and metadata refreshes are
// quick so that joining the group is short (it is not timed anyway).
func (r *rawKafka) consume(b *testing.B, topic, group string, window int) rawResult {
	return r.drain(b, topic, group, window, func(context.Context, kgo.Fetches) {})
}

// drain is consume with handle called on each poll's records before their
// offsets are committed.
func (r *rawKafka) drain(b *testing.B, topic, group string, window int, handle func(context.Context, kgo.Fetches)) rawResult {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.ConsumerGroup(group+"-"+benchID()), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.BlockRebalanceOnPoll(),
		kgo.HeartbeatInterval(100*time.Millisecond), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var start time.Time
	var busy time.Duration // machineBusy at start
	got, first := 0, 0
	for got < benchMessages {
		fs := cl.PollRecords(ctx, window)
		if err := ctx.Err(); err != nil {
			b.Fatalf("consumed %d of %d: %v", got, benchMessages, err)
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s/%d: %v", t, p, err) })
		n := fs.NumRecords()
		if n == 0 {
			cl.AllowRebalance()
			continue
		}
		if got == 0 {
			start, first, busy = time.Now(), n, machineBusy()
		}
		handle(ctx, fs)
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
		cl.AllowRebalance()
		got += n
	}
	return rawResult{rate: drainRate(got, first, start), calls: -1, busy: machineBusy() - busy}
}

// publish: ProduceSync of each batch, with relay's producer defaults
// (acks=all, idempotent, snappy, no linger, 1 MiB batches).
func (r *rawKafka) publish(b *testing.B, topic string, batch, workers int) rawResult {
	cl := r.producer(b)
	defer cl.Close()
	body := make([]byte, benchPayload)
	ctx := context.Background()
	rate := runParallel(b, batch, workers, func(n int) error {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Value: body, Headers: []kgo.RecordHeader{{Key: "relay-id", Value: []byte(relay.NewID())}}}
		}
		return cl.ProduceSync(ctx, recs...).FirstErr()
	})
	return rawResult{rate: rate, calls: -1}
}

// drop deletes topic, as the other backends' drop does, so that a run
// against a real cluster (RELAY_TEST_KAFKA_BROKERS) leaves no benchmark
// topics behind and an in-process kfake does not keep every earlier
// measurement's records; then it collects the garbage, so that the next
// measurement does not pay for this one's.
func (r *rawKafka) drop(topic string, _ ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...)); err == nil {
		_, _ = kadm.NewClient(cl).DeleteTopics(ctx, topic)
		cl.Close()
	}
	runtime.GC()
}

// forward is a franz-go forwarding loop, the one a user would write
// without relay: a group member polls at most window records of in,
// produces a copy of each to out on to's cluster with ProduceSync (one call per poll, so
// the client sends them in as many requests as it likes), and commits the
// poll's offsets once every copy is confirmed (at-least-once, as the
// bridge). The producer has the settings of publish. It forwards the
// benchMessages of in's backlog; the clock starts at the first poll that
// returns records, as drainRate's.
func (r *rawKafka) forward(b *testing.B, in, group string, window int, to *rawKafka, out string) rawResult {
	prod := to.producer(b)
	defer prod.Close()
	return r.drain(b, in, group, window, func(ctx context.Context, fs kgo.Fetches) {
		copies := make([]*kgo.Record, 0, fs.NumRecords())
		fs.EachRecord(func(rec *kgo.Record) {
			copies = append(copies, &kgo.Record{Topic: out, Key: rec.Key, Value: rec.Value, Headers: rec.Headers})
		})
		if err := prod.ProduceSync(ctx, copies...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	})
}

// producer is a client with relay's producer defaults.
func (r *rawKafka) producer(b *testing.B) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// measureRawForward returns the rate of rawKafka.forward over a backlog of
// benchMessages that relay published to from, with the bridge's default
// source window.
func measureRawForward(b *testing.B, from, to benchBackend) rawResult {
	in, out := "bench-rf-in-"+benchID(), "bench-rf-out-"+benchID()
	defer from.raw.drop(in, rawGroup)
	defer to.raw.drop(out, "reader")
	from.raw.prepare(b, in, rawGroup)
	dst := provisioned(b, to, out, "reader")
	_ = dst.Close()
	fill(b, from, in)
	return from.raw.(*rawKafka).forward(b, in, rawGroup, bridge.DefaultSourceWindow(from.subURL(rawGroup)), to.raw.(*rawKafka), out)
}

// --- SQS: aws-sdk-go-v2 ---

type rawSQS struct {
	svc *testenv.SQSService
}

// client returns an SQS client whose HTTP calls calls counts.
func (r *rawSQS) client(calls *callCounter) *sqs.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	cfg := aws.Config{Region: r.svc.Region, HTTPClient: &http.Client{Transport: calls.wrap(tr)}}
	if r.svc.Emulated {
		cfg.Credentials = credentials.NewStaticCredentialsProvider("test", "test", "")
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if r.svc.Endpoint != "" {
			o.BaseEndpoint = aws.String(r.svc.Endpoint)
		}
	})
}

func (r *rawSQS) queueURL(b *testing.B, q *sqs.Client, name string) string {
	out, err := q.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		b.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

// prepare lets relay create the queue (sqs:// reads the queue named by
// the topic; groups do not apply).
func (r *rawSQS) prepare(b *testing.B, topic, _ string) {
	be := benchBackend{pubURL: sqsURL(r.svc, ""), subURL: func(string) string { return sqsURL(r.svc, "") }}
	sub := provisioned(b, be, topic, "")
	_ = sub.Close()
}

// consume: relaysqs.DefaultPollers concurrent pollers, each
// ReceiveMessage(10, wait 1 s like the bench's sources) then one
// DeleteMessageBatch of what it got. The window does not apply: the
// pollers bound what is in flight to 40.
func (r *rawSQS) consume(b *testing.B, topic, _ string, _ int) rawResult {
	calls := newCallCounter()
	q := r.client(calls)
	qurl := r.queueURL(b, q, topic)
	calls.reset()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var got, first atomic.Int64
	var startNs, startBusy atomic.Int64
	var wg sync.WaitGroup
	for range relaysqs.DefaultPollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for got.Load() < int64(benchMessages) {
				out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(qurl), MaxNumberOfMessages: 10,
					WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				if startNs.CompareAndSwap(0, time.Now().UnixNano()) {
					first.Store(int64(len(out.Messages)))
					startBusy.Store(int64(machineBusy()))
				}
				entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(out.Messages))
				for i, m := range out.Messages {
					entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
				}
				del, err := q.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(qurl), Entries: entries})
				if err == nil && len(del.Failed) > 0 {
					err = fmt.Errorf("%d deletes failed", len(del.Failed))
				}
				if err != nil {
					b.Error(err)
					return
				}
				if got.Add(int64(len(out.Messages))) >= int64(benchMessages) {
					stop()
				}
			}
		}()
	}
	wg.Wait()
	if n := got.Load(); n < int64(benchMessages) {
		b.Fatalf("consumed %d of %d", n, benchMessages)
	}
	end, busy := time.Now(), machineBusy()-time.Duration(startBusy.Load())
	start := time.Unix(0, startNs.Load())
	rate := float64(got.Load()-first.Load()) / end.Sub(start).Seconds()
	return rawResult{rate: rate, calls: calls.total(), busy: busy}
}

// publish: each batch of 100 as ten concurrent SendMessageBatch calls of
// ten entries (what relay's Publish of 100 messages does), each entry the
// payload and an ID attribute.
func (r *rawSQS) publish(b *testing.B, topic string, batch, workers int) rawResult {
	calls := newCallCounter()
	q := r.client(calls)
	qurl := r.queueURL(b, q, topic)
	calls.reset()
	body := strings.Repeat("a", benchPayload)
	ctx := context.Background()
	rate := runParallel(b, batch, workers, func(n int) error {
		var wg sync.WaitGroup
		errs := make(chan error, (n+9)/10)
		for lo := 0; lo < n; lo += 10 {
			k := min(10, n-lo)
			wg.Add(1)
			go func() {
				defer wg.Done()
				entries := make([]sqstypes.SendMessageBatchRequestEntry, k)
				for i := range entries {
					entries[i] = sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body),
						MessageAttributes: map[string]sqstypes.MessageAttributeValue{"id": {DataType: aws.String("String"), StringValue: aws.String(relay.NewID())}}}
				}
				out, err := q.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(qurl), Entries: entries})
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
		return <-errs
	})
	return rawResult{rate: rate, calls: calls.total()}
}

func (r *rawSQS) drop(topic string, _ ...string) {
	q := r.client(newCallCounter())
	if out, err := q.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(topic)}); err == nil {
		_, _ = q.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	}
}

// sqsURL is the sqs:// URL of svc, through endpoint when it is not "".
func sqsURL(svc *testenv.SQSService, endpoint string) string {
	u := "sqs://?region=" + svc.Region
	if endpoint == "" {
		endpoint = svc.Endpoint
	}
	if endpoint != "" {
		u = testenv.WithParams(u, "endpoint", endpoint)
	}
	if svc.Emulated {
		u = testenv.WithParams(u, "access_key_id", "test", "secret_key", "test")
	}
	return u
}

// --- counting HTTP calls ---

// callCounter counts HTTP calls by SQS action (the X-Amz-Target of the
// JSON protocol, or the Action of the query protocol).
type callCounter struct {
	mu       sync.Mutex
	byAction map[string]int64
}

func newCallCounter() *callCounter { return &callCounter{byAction: map[string]int64{}} }

func (c *callCounter) count(r *http.Request) {
	action := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(action, '.'); i >= 0 {
		action = action[i+1:]
	}
	if action == "" && r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if v, err := url.ParseQuery(string(body)); err == nil {
			action = v.Get("Action")
		}
	}
	if action == "" {
		action = "?"
	}
	c.mu.Lock()
	c.byAction[action]++
	c.mu.Unlock()
}

func (c *callCounter) get(action string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAction[action]
}

func (c *callCounter) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, v := range c.byAction {
		n += v
	}
	return n
}

func (c *callCounter) reset() {
	c.mu.Lock()
	clear(c.byAction)
	c.mu.Unlock()
}

func (c *callCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.byAction))
	for k := range c.byAction {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, c.byAction[k])
	}
	return strings.Join(parts, " ")
}

type countingTransport struct {
	c    *callCounter
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.count(r)
	return t.next.RoundTrip(r)
}

func (c *callCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return countingTransport{c, next}
}

// countingProxy is a reverse proxy to target that counts the calls
// through it; its URL goes into a relay URL's endpoint=.
func countingProxy(b *testing.B, target string) (string, *callCounter) {
	u, err := url.Parse(target)
	if err != nil {
		b.Fatal(err)
	}
	calls := newCallCounter()
	rp := httputil.NewSingleHostReverseProxy(u)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	rp.Transport = tr
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.count(r)
		rp.ServeHTTP(w, r)
	}))
	b.Cleanup(func() { srv.Close(); tr.CloseIdleConnections() })
	return srv.URL, calls
}

// forwardCalls is one forward measurement with the HTTP calls of its SQS
// ends (nil for the others).
type forwardCalls struct {
	rate     float64
	busy     time.Duration // the machine's busy CPU time (machineBusy)
	src, dst *callCounter
}

// measureForwardCounted is measureForward at least once, with each SQS
// end of the route opened through a counting proxy of its own, so that
// the source's calls (receive, delete, visibility) and the destination's
// (send) are told apart even on sqs -> sqs.
func measureForwardCounted(b *testing.B, from, to benchBackend) forwardCalls {
	srcURL, dstURL := from.subURL("bridge"), to.pubURL
	var fc forwardCalls
	if from.name == "sqs" && sqsSvc.Endpoint != "" {
		var ep string
		ep, fc.src = countingProxy(b, sqsSvc.Endpoint)
		srcURL = testenv.WithParams(srcURL, "endpoint", ep)
	}
	if to.name == "sqs" && sqsSvc.Endpoint != "" {
		var ep string
		ep, fc.dst = countingProxy(b, sqsSvc.Endpoint)
		dstURL = testenv.WithParams(dstURL, "endpoint", ep)
	}
	fc.rate, fc.busy = runForward(b, from, to, relay.AtLeastOnce, srcURL, dstURL, nil)
	// A call moves at most ten messages: fewer calls than that through a
	// proxy mean the bridge's calls went around it.
	if fc.src != nil && fc.src.get("ReceiveMessage") < int64(benchMessages/10) {
		b.Fatalf("the source's proxy saw %v for %d messages forwarded", fc.src, benchMessages)
	}
	if fc.dst != nil && fc.dst.get("SendMessageBatch")+fc.dst.get("SendMessage") < int64(benchMessages/10) {
		b.Fatalf("the destination's proxy saw %v for %d messages forwarded", fc.dst, benchMessages)
	}
	return fc
}
