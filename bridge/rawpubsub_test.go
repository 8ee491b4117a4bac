package bridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/gcppubsub"
	"github.com/go-relay/relay/internal/testkit/pubsubfake"
)

// --- Google Cloud Pub/Sub: the raw API clients of cloud.google.com/go/pubsub/v2 ---

// gcpBackend is a pstest fake in this process (or the project of
// RELAY_TEST_GCP_PROJECT, the client finding its emulator or credentials).
func gcpBackend(b *testing.B) benchBackend {
	base, srv := pubsubfake.Base(b)
	project := "relay-test"
	var opts []option.ClientOption
	if srv != nil {
		opts = []option.ClientOption{option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	} else {
		project = strings.TrimPrefix(base, "gcppubsub://")
	}
	ctx := context.Background()
	topics, err := vkit.NewTopicAdminClient(ctx, opts...)
	if err != nil {
		b.Fatal(err)
	}
	subs, err := vkit.NewSubscriptionAdminClient(ctx, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = topics.Close(); _ = subs.Close() })
	return benchBackend{"gcppubsub", base, withGroup(base), &rawPubSub{base: base, project: project, topics: topics, subs: subs}}
}

type rawPubSub struct {
	base, project string
	topics        *vkit.TopicAdminClient
	subs          *vkit.SubscriptionAdminClient
}

func (r *rawPubSub) subPath(topic, group string) string {
	return "projects/" + r.project + "/subscriptions/" + gcppubsub.SubscriptionID(topic, group)
}

// prepare lets relay create the topic and the group's subscription, with
// relay's names.
func (r *rawPubSub) prepare(b *testing.B, topic, group string) {
	sub := provisioned(b, benchBackend{subURL: withGroup(r.base)}, topic, group)
	_ = sub.Close()
}

// consume: Pull for up to the window (at most 1000, the API's limit),
// then one Acknowledge of what it got.
func (r *rawPubSub) consume(b *testing.B, topic, group string, window int) rawResult {
	ctx := context.Background()
	sp := r.subPath(topic, group)
	var start time.Time
	var busy time.Duration
	got, first := 0, 0
	for got < benchMessages {
		resp, err := r.subs.Pull(ctx, &pb.PullRequest{Subscription: sp, MaxMessages: int32(min(window, gcppubsub.MaxBatch))})
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.ReceivedMessages) == 0 {
			continue
		}
		if start.IsZero() {
			start, busy, first = time.Now(), machineBusy(), len(resp.ReceivedMessages)
		}
		ids := make([]string, len(resp.ReceivedMessages))
		for i, m := range resp.ReceivedMessages {
			ids[i] = m.AckId
		}
		if err := r.subs.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: sp, AckIds: ids}); err != nil {
			b.Fatal(err)
		}
		got += len(ids)
	}
	return rawResult{rate: drainRate(got, first, start), calls: -1, busy: machineBusy() - busy}
}

// publish: one Publish request per batch, each message the payload and
// the ID attribute relay writes.
func (r *rawPubSub) publish(b *testing.B, topic string, batch, workers int) rawResult {
	payload := make([]byte, benchPayload)
	path := "projects/" + r.project + "/topics/" + topic
	rate := runParallel(b, batch, workers, func(n int) error {
		req := &pb.PublishRequest{Topic: path, Messages: make([]*pb.PubsubMessage, n)}
		for i := range req.Messages {
			req.Messages[i] = &pb.PubsubMessage{Data: payload, Attributes: map[string]string{gcppubsub.AttrID: relay.NewID()}}
		}
		_, err := r.topics.Publish(context.Background(), req)
		return err
	})
	return rawResult{rate: rate, calls: -1}
}

// drop deletes the groups' subscriptions and the topic.
func (r *rawPubSub) drop(topic string, groups ...string) {
	ctx := context.Background()
	for _, g := range groups {
		_ = r.subs.DeleteSubscription(ctx, &pb.DeleteSubscriptionRequest{Subscription: r.subPath(topic, g)})
	}
	_ = r.topics.DeleteTopic(ctx, &pb.DeleteTopicRequest{Topic: "projects/" + r.project + "/topics/" + topic})
}
