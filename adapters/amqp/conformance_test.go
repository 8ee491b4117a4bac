package amqp_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.ProxyGoroutines()...) }

func harness(t *testing.T, c *cleaner, kv ...string) drivertest.Harness {
	base := brokerURL(t)
	pubURL := testenv.WithParams(base, kv...)
	subURL := func(group string) string { return testenv.WithParams(base, append([]string{"group", group}, kv...)...) }
	return drivertest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			p, err := relay.OpenPublisher(context.Background(), pubURL)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			s, err := relay.OpenSubscriber(context.Background(), subURL(group))
			if err != nil {
				t.Fatal(err)
			}
			return &trackedSub{Subscriber: s.(*amqp.Subscriber), c: c, group: group}
		},
		NewSubscriberWith: func(t testing.TB, group string, o drivertest.SubscriberOptions) relay.Subscriber {
			kv := []string{"inflight", strconv.Itoa(o.InFlight)}
			if o.InFlightBytes != 0 {
				kv = append(kv, "inflight_bytes", strconv.FormatInt(o.InFlightBytes, 10))
			}
			s, err := relay.OpenSubscriber(context.Background(), testenv.WithParams(subURL(group), kv...))
			if err != nil {
				t.Fatal(err)
			}
			return &trackedSub{Subscriber: s.(*amqp.Subscriber), c: c, group: group}
		},
		PublisherURL:  pubURL,
		SubscriberURL: subURL,
	}
}

// TestConformance runs drivertest against classic queues (the default:
// Nack republishes for an exact Attempt), including a broker restart.
func TestConformance(t *testing.T) {
	c := newCleaner(t)
	h := harness(t, c)
	h.HungBroker = testenv.HungBroker(brokerURL(t))
	if why := canRestart(t); why == "" {
		h.Restart = restartBroker
	} else {
		t.Logf("no Restart hook: %s", why)
	}
	drivertest.Run(t, h)
}

// TestConformanceQuorum runs drivertest against quorum queues, where
// Attempt comes from the broker's x-delivery-count.
func TestConformanceQuorum(t *testing.T) {
	c := newCleaner(t)
	drivertest.Run(t, harness(t, c, "queue_type", "quorum"))
}

// TestConformanceTopicRequeue runs drivertest on topic exchanges with
// classic queues and broker requeue on Nack.
func TestConformanceTopicRequeue(t *testing.T) {
	c := newCleaner(t)
	h := harness(t, c, "exchange_kind", "topic", "nack_mode", "requeue")
	// With broker requeue a classic queue does not count deliveries; the
	// subscriber counts its own requeues in process, and after NackAfter
	// the copy carries the attempt.
	h.ReceiveTimeout = 30 * time.Second
	drivertest.Run(t, h)
}
