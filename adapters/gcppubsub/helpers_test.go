package gcppubsub_test

import (
	"context"
	"os"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/pubsubfake"
	"github.com/go-relay/relay/internal/testenv"
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

func newName(prefix string) string { return prefix + relay.NewID()[24:] }

func openPub(t testing.TB, raw string) relay.Publisher {
	t.Helper()
	p, err := relay.OpenPublisher(context.Background(), raw)
	if err != nil {
		t.Fatalf("OpenPublisher(%s): %v", raw, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func openSub(t testing.TB, raw string) relay.Subscriber {
	t.Helper()
	s, err := relay.OpenSubscriber(context.Background(), raw)
	if err != nil {
		t.Fatalf("OpenSubscriber(%s): %v", raw, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func provision(t testing.TB, s relay.Subscriber, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatalf("Provision(%s): %v", topic, err)
	}
}

func subscribe(t testing.TB, s relay.Subscriber, topic string) <-chan *relay.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := s.Subscribe(ctx, topic)
	if err != nil {
		t.Fatalf("Subscribe(%s): %v", topic, err)
	}
	return ch
}

func publish(t testing.TB, p relay.Publisher, topic string, msgs ...*relay.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Publish(ctx, topic, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// next returns the next message of ch, failing t after 20s.
func next(t testing.TB, ch <-chan *relay.Message, what string) *relay.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return m
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: nothing within 20s", what)
	}
	return nil
}

// none returns a message that arrives on ch within d, or nil.
func none(ch <-chan *relay.Message, d time.Duration) *relay.Message {
	select {
	case m := <-ch:
		return m
	case <-time.After(d):
		return nil
	}
}
