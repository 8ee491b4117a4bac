package bridge

import (
	"context"
	"net/url"
	"testing"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/kafka"
	_ "github.com/go-relay/relay/adapters/nats"
	_ "github.com/go-relay/relay/adapters/postgres"
	_ "github.com/go-relay/relay/adapters/redisstream"
	_ "github.com/go-relay/relay/adapters/sqs"
)

// declaring is an adapter of another module that declares its bridge
// defaults; the bridge takes them as it takes this module's.
type declaring struct{}

func (declaring) OpenPublisher(context.Context, *url.URL) (relay.Publisher, error) {
	return nil, relay.ErrNotSupported
}

func (declaring) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, relay.ErrNotSupported
}

func (declaring) URLDefaults() relay.URLDefaults {
	return relay.URLDefaults{SourceWindow: 77, SourceParams: map[string]string{"mode": "forward"}}
}

func init() { relay.Register("declaring", declaring{}) }

func TestSourceURL(t *testing.T) {
	cases := []struct {
		src  Source
		want string
	}{
		{Source{URL: "redis://h:6379/0", Group: "g"}, "redis://h:6379/0?group=g&inflight=1024"},
		{Source{URL: "amqp://u:p@h/?inflight=10", Group: "g"}, "amqp://u:p@h/?group=g&inflight=10"},
		{Source{URL: "amqp://u:p@h/", Group: "g"}, "amqp://u:p@h/?group=g&inflight=256"},
		{Source{URL: "kafka://h:9092?group=g", InFlight: 1000}, "kafka://h:9092?group=g&inflight=1000&share_payloads=true"},
		{Source{URL: "sqs://?region=r"}, "sqs://?inflight=1024&region=r"},
		{Source{URL: "nats://h", Group: "g"}, "nats://h?group=g&inflight=1024"},
		{Source{URL: "postgres://h/db", Group: "g"}, "postgres://h/db?group=g&inflight=1024"},
		{Source{URL: "kafka://h:9092", Group: "g"}, "kafka://h:9092?group=g&inflight=4096&share_payloads=true"},
		{Source{URL: "kafka://h:9092?share_payloads=false", Group: "g"}, "kafka://h:9092?group=g&inflight=4096&share_payloads=false"},
		{Source{URL: "KAFKA://h:9092", Group: "g"}, "kafka://h:9092?group=g&inflight=4096&share_payloads=true"},
		{Source{URL: "custom://h", Group: "g"}, "custom://h?group=g"}, // declares nothing: its adapter's default
		{Source{URL: "declaring://h", Group: "g"}, "declaring://h?group=g&inflight=77&mode=forward"},
		{Source{URL: "declaring://h?mode=x", Group: "g", InFlight: 3}, "declaring://h?group=g&inflight=3&mode=x"},
		{Source{URL: "nats://h", Group: "g", InFlight: 5}, "nats://h?group=g&inflight=5"},
	}
	for _, c := range cases {
		cfg := Config{Routes: []Route{{From: c.src}}}.withDefaults()
		if got := sourceURL(cfg.Routes[0].From); got != c.want {
			t.Errorf("%+v: %s, want %s", c.src, got, c.want)
		}
	}
	// On an exactly-once route the window is the transaction: Kafka keeps
	// the smaller default there.
	cfg := Config{Routes: []Route{{From: Source{URL: "kafka://h:9092", Group: "g"}, Guarantee: relay.ExactlyOnce}}}.withDefaults()
	if got, want := sourceURL(cfg.Routes[0].From), "kafka://h:9092?group=g&inflight=1024&share_payloads=true"; got != want {
		t.Errorf("exactly-once kafka source: %s, want %s", got, want)
	}
}
