package redisstream_test

import (
	"context"
	"testing"

	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// TestRequestReply runs the request/reply conformance checks: the
// requester uses a reply topic of its own and removes it on Close.
func TestRequestReply(t *testing.T) {
	base := redisURL(t)
	drivertest.RunRequestReply(t, drivertest.Harness{
		PublisherURL:  base,
		SubscriberURL: testenv.GroupURL(base),
		TopicExists: func(t testing.TB, topic string) bool {
			n, err := rawClient(t).Exists(context.Background(), topic).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		},
	})
}
