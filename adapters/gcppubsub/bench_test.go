package gcppubsub_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/gcppubsub"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkRatio compares relay with the Pub/Sub client library doing the
// same work on the same server in the same run, in interleaved rounds
// (relaytest.CompareRates): 100-byte payloads with the message ID in the
// relay-id attribute,
//
//   - publish/batch=100: Publish calls of 100 messages, each returning
//     once all are accepted; raw "rpc": one Publish request of the raw
//     API per 100; raw "client": the library's Publisher (its own
//     batching), waiting for the 100 results before the next 100;
//   - consume-ack/window=256: a backlog consumed and acked with at most
//     256 unacknowledged; raw "rpc": Pull(256) and one Acknowledge per
//     answer; raw "client": the library's streaming Subscriber with
//     MaxOutstandingMessages 256 (against the service only: pstest's
//     streaming pull sends one message per 10 ms tick).
//
// By default against a pstest fake in this process; point it at another
// server with RELAY_TEST_GCP_PROJECT (and PUBSUB_EMULATOR_HOST, e.g. the
// fake as its own process: go run ./internal/cmd/pstestserver). Use a
// fixed count:
//
//	go test -run '^$' -bench Ratio -benchtime 20000x ./adapters/gcppubsub/
func BenchmarkRatio(b *testing.B) {
	const rounds = 5
	tg := newTarget(b)
	raw := tg.raw(b)
	cmp := func(b *testing.B, relayRate, rawRate func(b *testing.B, n int) float64) {
		relaytest.CompareRates(b, rounds, relayRate, rawRate)
	}
	b.Run("publish/batch=100/rpc", func(b *testing.B) {
		cmp(b, func(b *testing.B, n int) float64 { return relayPublishRate(b, tg, raw, n) },
			func(b *testing.B, n int) float64 { return rpcPublishRate(b, raw, tg.project(), n) })
	})
	b.Run("publish/batch=100/client", func(b *testing.B) {
		cmp(b, func(b *testing.B, n int) float64 { return relayPublishRate(b, tg, raw, n) },
			func(b *testing.B, n int) float64 { return clientPublishRate(b, raw, tg.project(), n) })
	})
	b.Run("consume-ack/window=256/rpc", func(b *testing.B) {
		cmp(b, func(b *testing.B, n int) float64 { return relayConsumeRate(b, tg, raw, n, windowParam...) },
			func(b *testing.B, n int) float64 { return rpcConsumeRate(b, tg, raw, n) })
	})
	b.Run("consume-ack/window=256/client", func(b *testing.B) {
		if tg.srv != nil || os.Getenv("PUBSUB_EMULATOR_HOST") != "" {
			b.Skip("SKIP: on an emulator; pstest serves a streaming pull one message per 10 ms tick (about 90 msg/s), which measures the fake, not the client")
		}
		cmp(b, func(b *testing.B, n int) float64 { return relayConsumeRate(b, tg, raw, n, windowParam...) },
			func(b *testing.B, n int) float64 { return clientConsumeRate(b, tg, raw, n) })
	})
}

const (
	benchBatch  = 100
	benchWindow = 256
)

// windowParam sets the tuned benchmarks' window on relay's URL.
var windowParam = []string{"inflight", fmt.Sprint(benchWindow)}

// benchTopic creates a topic (and, for a consumer, the group's
// subscription as relay names it) and deletes both when the round ends.
func benchTopic(b *testing.B, raw *pubsub.Client, project, group string) (topic string, drop func()) {
	ctx := context.Background()
	topic = newName("bench-")
	tp := "projects/" + project + "/topics/" + topic
	if _, err := raw.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: tp}); err != nil {
		b.Fatal(err)
	}
	sp := ""
	if group != "" {
		sp = "projects/" + project + "/subscriptions/" + gcppubsub.SubscriptionID(topic, group)
		if _, err := raw.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{Name: sp, Topic: tp, AckDeadlineSeconds: 60}); err != nil {
			b.Fatal(err)
		}
	}
	return topic, func() {
		if sp != "" {
			_ = raw.SubscriptionAdminClient.DeleteSubscription(ctx, &pb.DeleteSubscriptionRequest{Subscription: sp})
		}
		_ = raw.TopicAdminClient.DeleteTopic(ctx, &pb.DeleteTopicRequest{Topic: tp})
	}
}

func relayPublishRate(b *testing.B, tg target, raw *pubsub.Client, n int) float64 {
	topic, drop := benchTopic(b, raw, tg.project(), "")
	defer drop()
	return relaytest.PublishRate(b, relaytest.OpenPublisher(b, tg.base), topic, n, benchBatch, make([]byte, 100))
}

func rpcPublishRate(b *testing.B, raw *pubsub.Client, project string, n int) float64 {
	topic, drop := benchTopic(b, raw, project, "")
	defer drop()
	start := time.Now()
	rpcFill(b, raw, project, topic, n)
	return float64(n) / time.Since(start).Seconds()
}

// rpcFill publishes n messages to topic with the raw API, 100 a request.
func rpcFill(b *testing.B, raw *pubsub.Client, project, topic string, n int) {
	payload := make([]byte, 100)
	for done := 0; done < n; done += benchBatch {
		k := min(benchBatch, n-done)
		req := &pb.PublishRequest{Topic: "projects/" + project + "/topics/" + topic, Messages: make([]*pb.PubsubMessage, k)}
		for j := range k {
			req.Messages[j] = &pb.PubsubMessage{Data: payload, Attributes: map[string]string{gcppubsub.AttrID: relay.NewID()}}
		}
		if _, err := raw.TopicAdminClient.Publish(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func clientPublishRate(b *testing.B, raw *pubsub.Client, project string, n int) float64 {
	ctx := context.Background()
	topic, drop := benchTopic(b, raw, project, "")
	defer drop()
	p := raw.Publisher(topic)
	defer p.Stop()
	payload := make([]byte, 100)
	results := make([]*pubsub.PublishResult, benchBatch)
	start := time.Now()
	for done := 0; done < n; done += benchBatch {
		k := min(benchBatch, n-done)
		for j := range k {
			results[j] = p.Publish(ctx, &pubsub.Message{Data: payload, Attributes: map[string]string{gcppubsub.AttrID: relay.NewID()}})
		}
		for _, r := range results[:k] {
			if _, err := r.Get(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

func relayConsumeRate(b *testing.B, tg target, raw *pubsub.Client, n int, params ...string) float64 {
	group := newName("g")
	topic, drop := benchTopic(b, raw, tg.project(), group)
	defer drop()
	rpcFill(b, raw, tg.project(), topic, n)
	return relaytest.ConsumeRate(b, relaytest.OpenSubscriber(b, tg.subURL(group, params...)), topic, n)
}

func rpcConsumeRate(b *testing.B, tg target, raw *pubsub.Client, n int) float64 {
	return rpcConsumeRateMax(b, tg, raw, n, benchWindow)
}

// rpcConsumeRateMax drains a backlog of n with Pull(max) and one
// Acknowledge per answer.
func rpcConsumeRateMax(b *testing.B, tg target, raw *pubsub.Client, n, max int) float64 {
	ctx := context.Background()
	group := newName("g")
	topic, drop := benchTopic(b, raw, tg.project(), group)
	defer drop()
	rpcFill(b, raw, tg.project(), topic, n)
	sp := "projects/" + tg.project() + "/subscriptions/" + gcppubsub.SubscriptionID(topic, group)
	start := time.Now()
	for got := 0; got < n; {
		resp, err := raw.SubscriptionAdminClient.Pull(ctx, &pb.PullRequest{Subscription: sp, MaxMessages: int32(min(max, n-got))})
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]string, 0, len(resp.ReceivedMessages))
		for _, rm := range resp.ReceivedMessages {
			if len(rm.Message.Data) != 100 {
				b.Fatal("bad payload")
			}
			ids = append(ids, rm.AckId)
		}
		if len(ids) > 0 {
			if err := raw.SubscriptionAdminClient.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: sp, AckIds: ids}); err != nil {
				b.Fatal(err)
			}
		}
		got += len(ids)
	}
	return float64(n) / time.Since(start).Seconds()
}

func clientConsumeRate(b *testing.B, tg target, raw *pubsub.Client, n int) float64 {
	group := newName("g")
	topic, drop := benchTopic(b, raw, tg.project(), group)
	defer drop()
	rpcFill(b, raw, tg.project(), topic, n)
	s := raw.Subscriber(gcppubsub.SubscriptionID(topic, group))
	s.ReceiveSettings.MaxOutstandingMessages = benchWindow
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got atomic.Int64
	start := time.Now()
	err := s.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		if len(m.Data) != 100 {
			panic("bad payload")
		}
		m.Ack()
		if got.Add(1) == int64(n) {
			cancel()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}
