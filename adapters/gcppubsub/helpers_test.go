package gcppubsub_test

import (
	"context"
	"os"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/go-relay/relay/internal/testkit/pubsubfake"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// target is where a test runs: the base URL (no group) and the fake, nil
// against a real project (RELAY_TEST_GCP_PROJECT).
type target struct {
	base string
	srv  *pubsubfake.Server
}

func newTarget(t testing.TB) target {
	base, srv := pubsubfake.Base(t)
	return target{base, srv}
}

// project is the project of the target's URLs.
func (tg target) project() string {
	if p := os.Getenv(pubsubfake.EnvProject); p != "" {
		return p
	}
	return "relay-test"
}

func (tg target) subURL(group string, kv ...string) string {
	return testenv.WithParams(tg.base, append([]string{"group", group}, kv...)...)
}

// raw is the Pub/Sub client library used directly, on the same server.
func (tg target) raw(t testing.TB) *pubsub.Client {
	t.Helper()
	var opts []option.ClientOption
	if tg.srv != nil {
		opts = []option.ClientOption{option.WithEndpoint(tg.srv.Addr), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	}
	c, err := pubsub.NewClient(context.Background(), tg.project(), opts...)
	if err != nil {
		t.Fatalf("raw client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newName(prefix string) string { return relaytest.Unique(prefix) }

// topic returns a new topic name whose topic and subscriptions are
// deleted when t ends (a real project keeps them otherwise).
func (tg target) topic(t testing.TB, prefix string) string {
	topic := newName(prefix)
	tg.dropAtEnd(t, topic)
	return topic
}

// dropAtEnd deletes topic and its subscriptions when t ends.
func (tg target) dropAtEnd(t testing.TB, topic string) {
	raw := tg.raw(t)
	t.Cleanup(func() {
		ctx := context.Background()
		path := "projects/" + tg.project() + "/topics/" + topic
		it := raw.TopicAdminClient.ListTopicSubscriptions(ctx, &pb.ListTopicSubscriptionsRequest{Topic: path})
		for {
			sub, err := it.Next()
			if err != nil {
				break
			}
			_ = raw.SubscriptionAdminClient.DeleteSubscription(ctx, &pb.DeleteSubscriptionRequest{Subscription: sub})
		}
		_ = raw.TopicAdminClient.DeleteTopic(ctx, &pb.DeleteTopicRequest{Topic: path})
	})
}
