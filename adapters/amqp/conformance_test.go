package amqp_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/adaptertest"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.ProxyGoroutines()...) }

func harness(t *testing.T, c *cleaner, kv ...string) adaptertest.Harness {
	base := brokerURL(t)
	pubURL := testenv.WithParams(base, kv...)
	subURL := func(group string) string { return testenv.WithParams(base, append([]string{"group", group}, kv...)...) }
	return adaptertest.Harness{
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
		NewSubscriberWith: func(t testing.TB, group string, o adaptertest.SubscriberOptions) relay.Subscriber {
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

// TestConformance runs adaptertest against classic queues (the default:
// Nack republishes for an exact Attempt), including a broker restart.
func TestConformance(t *testing.T) {
	c := newCleaner(t)
	h := harness(t, c)
	h.HungBroker = func(t testing.TB) adaptertest.HungBroker {
		proxied, p := testenv.ProxyURL(t, brokerURL(t))
		return adaptertest.HungBroker{
			PublisherURL:  proxied,
			SubscriberURL: func(group string) string { return testenv.WithParams(proxied, "group", group) },
			Hang:          p.Hang,
		}
	}
	if why := canRestart(t); why == "" {
		h.Restart = restartBroker
	} else {
		t.Logf("no Restart hook: %s", why)
	}
	adaptertest.Run(t, h)
}

// TestConformanceQuorum runs adaptertest against quorum queues, where
// Attempt comes from the broker's x-delivery-count.
func TestConformanceQuorum(t *testing.T) {
	c := newCleaner(t)
	adaptertest.Run(t, harness(t, c, "queue_type", "quorum"))
}

// TestConformanceTopicRequeue runs adaptertest on topic exchanges with
// classic queues and broker requeue on Nack.
func TestConformanceTopicRequeue(t *testing.T) {
	c := newCleaner(t)
	h := harness(t, c, "exchange_kind", "topic", "nack_mode", "requeue")
	// With broker requeue a classic queue does not count deliveries; the
	// subscriber counts its own requeues in process, and after NackAfter
	// the copy carries the attempt.
	h.ReceiveTimeout = 30 * time.Second
	adaptertest.Run(t, h)
}
