package kafka_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// restartable is a kfake cluster on a fixed port with its data on disk, so
// that it can be stopped and started again like a broker process: topics,
// records and committed offsets survive.
type restartable struct {
	mu   sync.Mutex
	opts []kfake.Opt
	c    *kfake.Cluster
}

func newRestartable(t *testing.T) (*restartable, []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	r := &restartable{opts: []kfake.Opt{
		kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(t.TempDir()),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}}
	if r.c, err = kfake.NewCluster(r.opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.c.Close()
	})
	return r, []string{"127.0.0.1:" + strconv.Itoa(port)}
}

func (r *restartable) restart(t testing.TB) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.Close()
	time.Sleep(200 * time.Millisecond) // clients see the broker gone
	c, err := kfake.NewCluster(r.opts...)
	if err != nil {
		t.Fatalf("restarting kfake: %v", err)
	}
	r.c = c
}

func TestConformance(t *testing.T) { testConformance(t) }

// TestConformanceSharedPayloads runs the suite with share_payloads=true,
// as the bridge's kafka:// sources run: messages over franz-go's fetch
// buffers must behave as copies do (apart from in-place changes, which
// the suite does not make).
func TestConformanceSharedPayloads(t *testing.T) { testConformance(t, "share_payloads", "true") }

func testConformance(t *testing.T, subParams ...string) {
	c := &cluster{brokers: testenv.KafkaBrokers(t)}
	var restart func(testing.TB)
	if c.brokers == nil {
		r, brokers := newRestartable(t)
		c.brokers = brokers
		restart = r.restart
	}
	// Two partitions: the competing-consumers check keys its messages
	// k0..k7, which Kafka's key hash (murmur2) spreads over partitions 0 and
	// 1 only; with two members over two partitions each gets one of them.
	pubURL := c.url("partitions", "2")
	liveSubs := &liveCount{n: map[string]map[*balancedSub]map[string]int{}}
	subURL := func(group string) string {
		return c.subURL(group, append([]string{"partitions", "2"}, subParams...)...)
	}
	drivertest.Run(t, drivertest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := relay.OpenPublisher(ctx, pubURL)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := relay.OpenSubscriber(ctx, subURL(group))
			if err != nil {
				t.Fatal(err)
			}
			return &balancedSub{Subscriber: s, c: c, t: t, group: group, live: liveSubs}
		},
		PublisherURL:  pubURL,
		SubscriberURL: subURL,
		Restart:       restart,
		HungBroker:    hungBroker,
		// The cluster restarted by the Reconnect check outlives it.
		IgnoreGoroutines: []goleak.Option{
			goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).run"),
			goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*broker).listen"),
		},
	})
}

// balancedSub makes Subscribe return once the group has rebalanced with
// every live member of the test holding partitions, as in a deployment
// where consumers are running before producers start. A Kafka group shares
// work by partitions, and a member that joins gets its share only after
// the rebalance; without the wait, the first member of the
// competing-consumers check takes all 200 messages before the second one
// is assigned anything. A subscriber is one member for all its topics,
// plus one more for each further concurrent subscription of one topic.
type balancedSub struct {
	relay.Subscriber
	c     *cluster
	t     testing.TB
	group string
	live  *liveCount

	mu   sync.Mutex
	ends []func()
}

// ReadHistory passes relay.HistoryReader through the wrapper.
func (b *balancedSub) ReadHistory(ctx context.Context, topic string, w relay.Window, fn func(relay.Stored) error) error {
	return b.Subscriber.(relay.HistoryReader).ReadHistory(ctx, topic, w, fn)
}

// liveCount counts the live subscriptions per group, subscriber and topic.
type liveCount struct {
	mu sync.Mutex
	n  map[string]map[*balancedSub]map[string]int
}

// add changes the count of (group, sub, topic) by d and returns how many
// members the group has: per subscriber, its most subscribed topic's count.
func (l *liveCount) add(group string, sub *balancedSub, topic string, d int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[group] == nil {
		l.n[group] = map[*balancedSub]map[string]int{}
	}
	if sub != nil {
		if l.n[group][sub] == nil {
			l.n[group][sub] = map[string]int{}
		}
		l.n[group][sub][topic] += d
	}
	members := 0
	for _, topics := range l.n[group] {
		most := 0
		for _, n := range topics {
			most = max(most, n)
		}
		members += most
	}
	return members
}

func (b *balancedSub) Provision(ctx context.Context, topic string) error {
	return b.Subscriber.(relay.Provisioner).Provision(ctx, topic)
}

func (b *balancedSub) Subscribe(ctx context.Context, topic string) (<-chan *relay.Message, error) {
	ch, err := b.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	b.live.add(b.group, b, topic, 1)
	var once sync.Once
	end := func() { once.Do(func() { b.live.add(b.group, b, topic, -1) }) }
	stop := context.AfterFunc(ctx, end)
	b.mu.Lock()
	b.ends = append(b.ends, func() { stop(); end() })
	b.mu.Unlock()
	b.c.waitBalanced(b.t, b.group, func() int { return b.live.add(b.group, nil, "", 0) })
	return ch, nil
}

func (b *balancedSub) Close() error {
	err := b.Subscriber.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, end := range b.ends {
		end()
	}
	b.ends = nil
	return err
}
