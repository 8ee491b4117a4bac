package kafka_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/kfakeopts"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"

	_ "github.com/go-relay/relay/adapters/kafka"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster is the Kafka the tests talk to: an in-process kfake cluster, or
// the real one named by RELAY_TEST_KAFKA_BROKERS.
type cluster struct {
	brokers []string
	fake    *kfake.Cluster // nil for a real cluster
}

// newCluster starts a kfake cluster for this test (closed at cleanup), or
// returns the real cluster.
func newCluster(t testing.TB, opts ...kfake.Opt) *cluster {
	t.Helper()
	if b := testenv.KafkaBrokers(t); b != nil {
		return &cluster{brokers: b}
	}
	c, err := kfake.NewCluster(append(kfakeopts.Defaults(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &cluster{brokers: c.ListenAddrs(), fake: c}
}

// needFake skips a test that uses kfake's control hooks when the tests run
// against a real cluster.
func (c *cluster) needFake(t testing.TB) {
	t.Helper()
	if c.fake == nil {
		t.Skip("SKIP: uses kfake fault injection; RELAY_TEST_KAFKA_BROKERS points at a real cluster")
	}
}

// url builds a kafka:// URL for the cluster with params (k, v pairs),
// tuned for quick tests: fast metadata refresh and heartbeats.
func (c *cluster) url(params ...string) string {
	q := url.Values{}
	for _, b := range c.brokers[1:] {
		q.Add("seed", b)
	}
	q.Set("metadata_min_age", "50ms")
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	return "kafka://" + c.brokers[0] + "?" + q.Encode()
}

// subURL is url plus group and quick group timings (6s is real Kafka's
// minimum session timeout).
func (c *cluster) subURL(group string, params ...string) string {
	base := []string{"group", group, "heartbeat_interval", "100ms", "session_timeout", "6s", "fetch_max_wait", "200ms"}
	return c.url(append(base, params...)...)
}

func (c *cluster) admin(t testing.TB) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// createTopic creates topic with n partitions.
func (c *cluster) createTopic(t testing.TB, topic string, n int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.admin(t).CreateTopic(ctx, n, -1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// committed returns the group's committed offset per partition of topic.
func (c *cluster) committed(t testing.TB, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.admin(t).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// waitMembers waits until group has n members in a stable state.
func (c *cluster) waitMembers(t testing.TB, group string, n int) {
	t.Helper()
	adm := c.admin(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		gs, err := adm.DescribeGroups(ctx, group)
		cancel()
		if err == nil {
			if g, ok := gs[group]; ok && g.State == "Stable" && len(g.Members) == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s did not reach %d stable members (last: %+v, %v)", group, n, gs[group].State, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitBalanced waits until group is stable with members() members (read
// again on every try), each holding at least one partition.
func (c *cluster) waitBalanced(t testing.TB, group string, members func() int) {
	t.Helper()
	adm := c.admin(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := members()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		gs, err := adm.DescribeGroups(ctx, group)
		cancel()
		if g, ok := gs[group]; err == nil && ok && g.State == "Stable" && len(g.Members) == n {
			balanced := true
			for _, m := range g.Members {
				a, ok := m.Assigned.AsConsumer()
				if !ok || len(a.Topics) == 0 || len(a.Topics[0].Partitions) == 0 {
					balanced = false
				}
			}
			if balanced {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s not balanced over %d members (%d): %v", group, n, len(gs[group].Members), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func unique(prefix string) string {
	return prefix + "-" + strings.ReplaceAll(relay.NewID(), "-", "")[:20]
}

func publishN(t testing.TB, p relay.Publisher, topic string, n int, key func(i int) string) []*relay.Message {
	t.Helper()
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("m%d", i)))
		if key != nil {
			msgs[i].Key = key(i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, topic, msgs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
	return msgs
}

// recv reads one message or fails after a generous bound.
func recv(t testing.TB, ch <-chan *relay.Message) *relay.Message {
	t.Helper()
	return relaytest.Next(t, ch, "the next message")
}

// quiet asserts that nothing arrives on ch for d.
func quiet(t testing.TB, ch <-chan *relay.Message, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-ch:
		if ok {
			t.Fatalf("unexpected message %s (%q, attempt %d)", m.ID, m.Payload, m.Attempt())
		}
	case <-time.After(d):
	}
}
