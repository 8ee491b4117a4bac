package amqp_test

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// brokerURL is the RabbitMQ the tests use (RELAY_TEST_AMQP_URL or the local
// one); the test fails (CI) or skips when it is unreachable.
func brokerURL(t testing.TB) string {
	t.Helper()
	return testenv.AMQP(t)
}

func unique(prefix string) string { return prefix + "-" + relay.NewID()[24:] }

// cleaner deletes the exchanges and queues a test created, so that the
// shared broker does not fill up with test topology.
type cleaner struct {
	mu     sync.Mutex
	topics map[string]bool
	pairs  map[[2]string]bool // topic, group
}

func newCleaner(t testing.TB) *cleaner {
	c := &cleaner{topics: map[string]bool{}, pairs: map[[2]string]bool{}}
	t.Cleanup(func() { c.run(t) })
	return c
}

func (c *cleaner) topic(topic string) {
	c.mu.Lock()
	c.topics[topic] = true
	c.mu.Unlock()
}

func (c *cleaner) pair(topic, group string) {
	c.mu.Lock()
	c.topics[topic] = true
	c.pairs[[2]string{topic, group}] = true
	c.mu.Unlock()
}

func (c *cleaner) run(t testing.TB) {
	u := testenv.URL("RELAY_TEST_AMQP_URL", testenv.DefaultAMQPURL)
	conn, err := amqp091.Dial(u)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.pairs {
		q := p[0] + "." + p[1]
		_, _ = ch.QueueDelete(q, false, false, false)
		for k := 0; k <= 31; k++ {
			_, _ = ch.QueueDelete(q+".relay-delay-"+strconv.FormatUint(1<<k, 10)+"ms", false, false, true)
		}
	}
	for topic := range c.topics {
		_ = ch.ExchangeDelete(topic, false, false)
		// Delayed delivery's due exchange and queues (see topology.go).
		dx, dqs := amqp.DueTopology(topic)
		for _, q := range dqs {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(dx, false, false)
	}
}

// trackedSub records the topics a subscriber touches for the cleaner.
type trackedSub struct {
	*amqp.Subscriber
	c     *cleaner
	group string
}

func (s *trackedSub) Subscribe(ctx context.Context, topic string) (<-chan *relay.Message, error) {
	s.c.pair(topic, s.group)
	return s.Subscriber.Subscribe(ctx, topic)
}

func (s *trackedSub) Provision(ctx context.Context, topic string) error {
	s.c.pair(topic, s.group)
	return s.Subscriber.Provision(ctx, topic)
}

func parse(t testing.TB, raw string) amqp.Config {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := amqp.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func openPub(t testing.TB, kv ...string) *amqp.Publisher {
	t.Helper()
	return openPubCfg(t, parse(t, testenv.WithParams(brokerURL(t), kv...)))
}

func openPubCfg(t testing.TB, cfg amqp.Config) *amqp.Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := amqp.NewPublisher(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func openSub(t testing.TB, c *cleaner, group string, kv ...string) *trackedSub {
	t.Helper()
	return openSubCfg(t, c, parse(t, testenv.WithParams(brokerURL(t), append([]string{"group", group}, kv...)...)))
}

func openSubCfg(t testing.TB, c *cleaner, cfg amqp.Config) *trackedSub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := amqp.NewSubscriber(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &trackedSub{Subscriber: s, c: c, group: cfg.Group}
}

// rawChannel is a plain amqp091 channel on the test broker.
func rawChannel(t testing.TB) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// rabbit is the test broker for restarts: RabbitMQ's application is
// stopped and started with rabbitmqctl (or the commands in
// RELAY_TEST_AMQP_STOP / _START).
var rabbit = testenv.LocalRabbitMQ(brokerUp)

// canRestart reports why the test broker cannot be restarted from here
// (see testenv.LocalBroker); stopBroker stops it until startBroker (or the
// test's cleanup) starts it again; restartBroker is drivertest's Restart
// hook.
var (
	canRestart    = rabbit.CanRestart
	stopBroker    = rabbit.Stop
	startBroker   = rabbit.Start
	restartBroker = rabbit.Restart
)

func brokerUp() bool {
	conn, err := amqp091.DialConfig(testenv.URL("RELAY_TEST_AMQP_URL", testenv.DefaultAMQPURL),
		amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}
