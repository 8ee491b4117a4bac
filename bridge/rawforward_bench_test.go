package bridge_test

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
)

// The fastest forwarding loops a user writes with the client libraries
// for BenchmarkBridgeProcess's pairs, each in one goroutine, at-least-once
// as the bridge (a batch is acked at the source once the destination
// confirmed it): reads of up to rawForwardBatch, the batch published in
// one call, then acked. rawForwardTime times one over a backlog of
// benchMessages from the moment it starts (its clients' set-up and group
// joins included, as the bridge process's start-up is).

// rawForwardBatch is the raw forwarding loops' read size.
const rawForwardBatch = 1000

// rawForwardTime forwards the backlog of in (read as group) to out and
// returns how long it took, or false when the pair has no raw loop.
func rawForwardTime(b *testing.B, from, to benchBackend, in, group, out string) (time.Duration, bool) {
	start := time.Now()
	switch src := from.raw.(type) {
	case *rawRedis:
		dst, ok := to.raw.(*rawKafka)
		if !ok {
			return 0, false
		}
		forwardRedisToKafka(b, src, in, group, dst, out)
	case *rawAMQP:
		dst, ok := to.raw.(*rawKafka)
		if !ok {
			return 0, false
		}
		forwardAMQPToKafka(b, src, in, group, dst, out)
	case *rawKafka:
		dst, ok := to.raw.(*rawRedis)
		if !ok {
			return 0, false
		}
		forwardKafkaToRedis(b, src, in, group, dst, out)
	default:
		return 0, false
	}
	return time.Since(start), true
}

// forwardRedisToKafka: XREADGROUP COUNT rawForwardBatch, ProduceSync of the
// batch, and its XACK pipelined with the next read.
func forwardRedisToKafka(b *testing.B, src *rawRedis, in, group string, dst *rawKafka, out string) {
	ctx := context.Background()
	prod := dst.producer(b)
	defer prod.Close()
	var ack []string // the previous batch's IDs
	recs := make([]*kgo.Record, 0, rawForwardBatch)
	for got := 0; got < benchMessages; {
		var read *redis.XStreamSliceCmd
		_, err := src.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if len(ack) > 0 {
				p.XAck(ctx, in, group, ack...)
			}
			read = p.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: group, Consumer: "raw", Streams: []string{in, ">"}, Count: rawForwardBatch, Block: 5 * time.Second,
			})
			return nil
		})
		if err != nil {
			b.Fatalf("XREADGROUP after %d of %d: %v", got, benchMessages, err)
		}
		ack, recs = ack[:0], recs[:0]
		for _, m := range read.Val()[0].Messages {
			id, _ := m.Values[redisstream.FieldID].(string)
			p, _ := m.Values[redisstream.FieldPayload].(string)
			recs = append(recs, &kgo.Record{Topic: out, Value: []byte(p), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}})
			ack = append(ack, m.ID)
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		got += len(recs)
	}
	if err := src.c.XAck(ctx, in, group, ack...).Err(); err != nil {
		b.Fatal(err)
	}
}

// forwardAMQPToKafka: prefetch rawForwardBatch; every buffered delivery
// (at least one) forms a batch, ProduceSync of it, one multiple ack.
func forwardAMQPToKafka(b *testing.B, src *rawAMQP, in, group string, dst *rawKafka, out string) {
	ctx := context.Background()
	prod := dst.producer(b)
	defer prod.Close()
	ch := src.channel(b)
	defer ch.Close()
	if err := ch.Qos(rawForwardBatch, 0, false); err != nil {
		b.Fatal(err)
	}
	dels, err := ch.Consume(in+"."+group, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]*kgo.Record, 0, rawForwardBatch)
	add := func(d amqp091.Delivery) {
		recs = append(recs, &kgo.Record{Topic: out, Value: d.Body, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(d.MessageId)}}})
	}
	for got := 0; got < benchMessages; {
		var last amqp091.Delivery
		select {
		case d, ok := <-dels:
			if !ok {
				b.Fatal("deliveries closed")
			}
			last = d
		case <-time.After(time.Minute):
			b.Fatalf("no delivery for a minute after %d of %d", got, benchMessages)
		}
		recs = recs[:0]
		add(last)
	burst:
		for len(recs) < rawForwardBatch {
			select {
			case d, ok := <-dels:
				if !ok {
					b.Fatal("deliveries closed")
				}
				last = d
				add(d)
			default:
				break burst
			}
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		if err := last.Ack(true); err != nil {
			b.Fatal(err)
		}
		got += len(recs)
	}
}

// forwardKafkaToRedis: PollRecords of up to rawForwardBatch, one pipeline
// of XADDs, then the offsets committed (rawKafka.drain).
func forwardKafkaToRedis(b *testing.B, src *rawKafka, in, group string, dst *rawRedis, out string) {
	src.drain(b, in, group, rawForwardBatch, func(ctx context.Context, fs kgo.Fetches) {
		cmds, err := dst.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			fs.EachRecord(func(rec *kgo.Record) {
				p.XAdd(ctx, &redis.XAddArgs{Stream: out, Values: []any{redisstream.FieldID, relay.NewID(), redisstream.FieldPayload, rec.Value}})
			})
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cmds {
			if c.Err() != nil {
				b.Fatal(c.Err())
			}
		}
	})
}
