package redisstream_test

import (
	"context"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/adaptertest"
	"github.com/go-relay/relay/internal/testenv"
)

// TestRequestReply runs the request/reply conformance checks: the
// requester uses a reply topic of its own and removes it on Close.
func TestRequestReply(t *testing.T) {
	base := redisURL(t)
	adaptertest.RunRequestReply(t, adaptertest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			p, err := relay.OpenPublisher(context.Background(), base)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			s, err := relay.OpenSubscriber(context.Background(), testenv.WithParams(base, "group", group))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		TopicExists: func(t testing.TB, topic string) bool {
			n, err := rawClient(t).Exists(context.Background(), topic).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		},
	})
}
