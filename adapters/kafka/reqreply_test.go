package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/drivertest"
)

// TestRequestReply runs the request/reply conformance checks against
// kfake: the requester uses a reply topic of its own (provisioned, so that
// no reply is published before its group exists) and removes it on Close.
func TestRequestReply(t *testing.T) {
	c := newCluster(t)
	open := func(t testing.TB, url string, sub bool) any {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var v any
		var err error
		if sub {
			v, err = relay.OpenSubscriber(ctx, url)
		} else {
			v, err = relay.OpenPublisher(ctx, url)
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	drivertest.RunRequestReply(t, drivertest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher { return open(t, c.url(), false).(relay.Publisher) },
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			return open(t, c.subURL(group), true).(relay.Subscriber)
		},
	})
}
