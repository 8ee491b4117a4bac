package watermill_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/memory"
	_ "github.com/go-relay/relay/adapters/redisstream"
	wm "github.com/go-relay/relay/compat/watermill"
	"github.com/go-relay/relay/internal/testenv"
)

// features are the Watermill test suite's Features for a relay backend,
// derived from what it declares in relay.Capabilities.
func features(caps relay.Capabilities) tests.Features {
	return tests.Features{
		// Every relay backend has groups (mem://, redis://, amqp://).
		ConsumerGroups: true,
		// relay is at-least-once everywhere.
		ExactlyOnceDelivery: false,
		// OrderPerTopic holds per subscription; the suite's ordering test
		// merges ten competing consumers unless told that order holds
		// with a single subscriber only.
		GuaranteedOrder:                     caps.Ordering == relay.OrderPerTopic,
		GuaranteedOrderWithSingleSubscriber: true,
		// Watermill's Persistent: messages are kept for a group across
		// Pub/Sub instances. Durable backends do; mem:// does too within
		// the process (every mem://NAME shares the broker NAME).
		Persistent: caps.Durable || caps.Backend == "memory",
		// A new group does not replay what other groups consumed
		// (no backend tested here declares Replay).
		NewSubscriberReceivesOldMessages: caps.Replay,
		// The message context is not carried by any broker.
		ContextPreserved: false,
		// The shared brokers must not be restarted from tests (TestReconnect
		// is skipped); relay's own reconnect is checked by adaptertest.
		RestartServiceCommand: nil,
		// The full counts (5,000 messages to 50 subscribers, 10,000 in
		// TestPublisherClose) take about 13s for all three backends under
		// -race on 2 cores; go test -short reduces them.
		ForceShort: false,
		GenerateTopicFunc: func(tctx tests.TestContext) string {
			return "wmtest-" + strings.ReplaceAll(string(tctx.TestID), "-", "")
		},
	}
}

// runUniversal runs Watermill's universal Pub/Sub tests against the relay
// backend at base, through NewPublisher and NewSubscriber.
func runUniversal(t *testing.T, base string) {
	ctx := context.Background()
	open := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		p, err := relay.OpenPublisher(ctx, base)
		if err != nil {
			t.Fatalf("OpenPublisher(%s): %v", relay.Redact(base), err)
		}
		s, err := relay.OpenSubscriber(ctx, withQuery(t, base, "group", group))
		if err != nil {
			t.Fatalf("OpenSubscriber(%s): %v", relay.Redact(base), err)
		}
		wp, ws := wm.NewPublisher(p, wm.Options{}), wm.NewSubscriber(s, wm.Options{})
		// The suite closes what it opens, except the subscribers its
		// ordering test creates after it closed their multiplier (its
		// deferred Close runs at once): close them when the test ends.
		// Close is idempotent.
		t.Cleanup(func() { _ = wp.Close(); _ = ws.Close() })
		return wp, ws
	}
	p, err := relay.OpenPublisher(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	caps := p.(relay.CapabilityReporter).Capabilities()
	_ = p.Close()
	f := features(caps)
	t.Logf("Watermill features for %s: %+v", caps.Backend, f)
	// One group for the suite's plain constructor: its subscribers of one
	// topic are competing consumers, as the suite expects.
	plain := "wm-" + relay.NewID()[24:]
	tests.TestPubSub(t, f,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return open(t, plain) },
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) { return open(t, group) },
	)
}

func withQuery(t testing.TB, raw, k, v string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestUniversalMemory(t *testing.T) {
	runUniversal(t, "mem://wm-universal-"+relay.NewID()[24:]+"?inflight=8")
}

func TestUniversalRedis(t *testing.T) {
	runUniversal(t, withQuery(t, testenv.Redis(t), "inflight", "8"))
}

func TestUniversalAMQP(t *testing.T) {
	runUniversal(t, withQuery(t, testenv.AMQP(t), "inflight", "8"))
}
