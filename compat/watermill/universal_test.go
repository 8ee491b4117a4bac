package watermill_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/kafka"
	_ "github.com/go-relay/relay/adapters/memory"
	_ "github.com/go-relay/relay/adapters/redisstream"
	wm "github.com/go-relay/relay/compat/watermill"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// features are the Watermill test suite's Features for a relay backend,
// derived from what it declares in relay.Capabilities.
func features(caps relay.Capabilities) tests.Features {
	return tests.Features{
		// Every relay backend has groups but sqs://, where the queue is
		// the group of competing consumers.
		ConsumerGroups: hasGroups(caps),
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
		// The suite means: a new subscriber of a group receives what the
		// group already consumed. No relay backend does that: a group
		// goes on from where it is (Kafka's Replay is a group started
		// from an old position on request, not this).
		NewSubscriberReceivesOldMessages: false,
		// The message context is not carried by any broker.
		ContextPreserved: false,
		// The shared brokers must not be restarted from tests (TestReconnect
		// is skipped); relay's own reconnect is checked by drivertest.
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

// hasGroups reports whether subscribers of the backend take group=.
func hasGroups(caps relay.Capabilities) bool { return caps.Backend != "sqs" }

// names records the topics and groups a run of the suite used, for
// deleting them from the shared brokers afterwards.
type names struct {
	mu             sync.Mutex
	topics, groups []string
}

func (n *names) add(list *[]string, v string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	*list = append(*list, v)
}

// topicVariants are the names the suite derives from a generated topic.
func (n *names) topicVariants() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var all []string
	for _, t := range n.topics {
		all = append(all, t, t+"-1", t+"-2")
		for i := 0; i < 20; i++ {
			all = append(all, fmt.Sprintf("%s-%d", t, i))
		}
	}
	return all
}

// runUniversal runs Watermill's universal Pub/Sub tests against the relay
// backend at base, through NewPublisher and NewSubscriber, and returns the
// names it used.
func runUniversal(t *testing.T, base string) *names {
	ctx := context.Background()
	used := &names{}
	p, err := relay.OpenPublisher(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	caps := p.(relay.CapabilityReporter).Capabilities()
	_ = p.Close()
	open := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		used.add(&used.groups, group)
		p, err := relay.OpenPublisher(ctx, base)
		if err != nil {
			t.Fatalf("OpenPublisher(%s): %v", relay.Redact(base), err)
		}
		subURL := base
		if hasGroups(caps) {
			subURL = withQuery(t, base, "group", group)
		}
		s, err := relay.OpenSubscriber(ctx, subURL)
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
	f := features(caps)
	generate := f.GenerateTopicFunc
	f.GenerateTopicFunc = func(tctx tests.TestContext) string {
		topic := generate(tctx)
		used.add(&used.topics, topic)
		return topic
	}
	t.Logf("Watermill features for %s: %+v", caps.Backend, f)
	// One group for the suite's plain constructor: its subscribers of one
	// topic are competing consumers, as the suite expects.
	plain := "wm-" + relay.NewID()[24:]
	tests.TestPubSub(t, f,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return open(t, plain) },
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) { return open(t, group) },
	)
	return used
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
	raw := testenv.Redis(t)
	// Every stream of the run under one prefix, deleted when it ends.
	prefix := "wmtest:" + relay.NewID()[24:] + ":"
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	// t.Cleanup, not defer: the suite's tests are parallel subtests,
	// which run after this function returned.
	t.Cleanup(func() {
		defer rc.Close()
		ctx := context.Background()
		keys, err := rc.Keys(ctx, prefix+"*").Result()
		if err == nil && len(keys) > 0 {
			err = rc.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("deleting the run's streams: %v", err)
		}
	})
	runUniversal(t, withQuery(t, withQuery(t, raw, "prefix", prefix), "inflight", "8"))
}

func TestUniversalAMQP(t *testing.T) {
	raw := testenv.AMQP(t)
	used := runUniversal(t, withQuery(t, raw, "inflight", "8"))
	// Once the suite's parallel subtests are done, delete the run's
	// exchanges (one per topic) and queues (one per topic and group);
	// deleting a name that does not exist is a no-op.
	t.Cleanup(func() { deleteAMQP(t, raw, used) })
}

func deleteAMQP(t *testing.T, raw string, used *names) {
	conn, err := amqp091.Dial(raw)
	if err != nil {
		t.Fatalf("deleting the run's queues: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("deleting the run's queues: %v", err)
	}
	for _, topic := range used.topicVariants() {
		for _, g := range used.groups {
			if _, err := ch.QueueDelete(topic+"."+g, false, false, false); err != nil {
				t.Fatalf("deleting queue %s.%s: %v", topic, g, err)
			}
		}
		if err := ch.ExchangeDelete(topic, false, false); err != nil {
			t.Fatalf("deleting exchange %s: %v", topic, err)
		}
	}
}

// TestUniversalKafka runs the suite on kafka://, against the cluster named
// by RELAY_TEST_KAFKA_BROKERS or an in-process kfake cluster.
func TestUniversalKafka(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	if brokers == nil {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.DefaultNumPartitions(4))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		brokers = c.ListenAddrs()
	}
	base := "kafka://" + brokers[0] + "?inflight=8"
	for _, b := range brokers[1:] {
		base += "&seed=" + b
	}
	runUniversal(t, base)
}
