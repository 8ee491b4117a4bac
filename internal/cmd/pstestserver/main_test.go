package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/goleak"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestServesPubSub starts the server on a free port, publishes a message
// to it and pulls it back with the raw API clients, then stops it.
func TestServesPubSub(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs last
	var out bytes.Buffer
	listening := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	w := &signalWriter{buf: &out, first: listening}
	go func() { done <- run([]string{"-port", "0"}, w, io.Discard, func() { <-release }) }()
	stop := sync.OnceValue(func() error { close(release); return <-done })
	t.Cleanup(func() { _ = stop() })
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("run ended before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening within 10s")
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "pstestserver: listening on ")
	if !ok || addr == "" {
		t.Fatalf("first line %q does not name the address", out.String())
	}

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
		var usage usageError
		if !errors.As(err, &usage) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
}

// signalWriter closes first after the first write.
type signalWriter struct {
	buf   *bytes.Buffer
	first chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.buf.Write(p)
	if w.first != nil {
		close(w.first)
		w.first = nil
	}
	return n, err
}
