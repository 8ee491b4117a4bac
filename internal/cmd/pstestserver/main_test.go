package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/goleak"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/go-relay/relay/internal/testkit/servercmd"
)

// TestServesPubSub starts the server on a free port, publishes a message
// to it and pulls it back with the raw API clients, then stops it.
func TestServesPubSub(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs last
	addr, stop := servercmd.Start(t, "pstestserver", run, "-port", "0")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := []option.ClientOption{option.WithEndpoint(addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	topics, err := vkit.NewTopicAdminClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer topics.Close()
	subs, err := vkit.NewSubscriptionAdminClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer subs.Close()
	if _, err := topics.CreateTopic(ctx, &pb.Topic{Name: "projects/p/topics/t"}); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if _, err := subs.CreateSubscription(ctx, &pb.Subscription{Name: "projects/p/subscriptions/s", Topic: "projects/p/topics/t"}); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	if _, err := topics.Publish(ctx, &pb.PublishRequest{Topic: "projects/p/topics/t", Messages: []*pb.PubsubMessage{{Data: []byte("hello")}}}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	resp, err := subs.Pull(ctx, &pb.PullRequest{Subscription: "projects/p/subscriptions/s", MaxMessages: 10})
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if len(resp.ReceivedMessages) != 1 || string(resp.ReceivedMessages[0].Message.Data) != "hello" {
		t.Fatalf("pulled %v, want the message published", resp.ReceivedMessages)
	}
	_ = topics.Close()
	_ = subs.Close()
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-port", "70000"}, {"extra"}, {"-nope"}} {
		err := run(args, io.Discard, io.Discard, func() { t.Fatalf("%q: started the server", args) })
		var usage servercmd.UsageError
		if !errors.As(err, &usage) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
}
