package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// kafkaURL is a kfake cluster for this test (or the real one of
// RELAY_TEST_KAFKA_BROKERS), as kafka://host:port.
func kafkaURL(t testing.TB) string {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	if brokers == nil {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(4))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		brokers = c.ListenAddrs()
	}
	return "kafka://" + brokers[0]
}

// TestExactlyOnceRoute forwards 500 messages kafka -> kafka on an
// exactly-once route: a read_committed reader (the default isolation) gets
// each once, and nothing else follows.
func TestExactlyOnceRoute(t *testing.T) {
	k := kafkaURL(t)
	in, out := uniq("in"), uniq("out")
	route := bridge.Route{
		Name:      "eo",
		From:      bridge.Source{URL: k + "?transactional_id=" + uniq("tx"), Topic: in, Group: "bridge"},
		To:        bridge.Destination{URL: k, Topic: out},
		Guarantee: relay.ExactlyOnce,
	}
	cfg := bridge.Config{Routes: []bridge.Route{route}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	br, err := bridge.New(cfg, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	provision(t, k, "reader", out)
	const n = 500
	var msgs []*relay.Message
	for i := range n {
		msgs = append(msgs, &relay.Message{ID: fmt.Sprintf("m%d", i), Payload: []byte(fmt.Sprint(i))})
	}
	publish(t, k, in, msgs...)
	stop := runBridge(t, br)
	consume(t, k, "reader", out, n)
	// The one replica holds every partition of the source.
	if h := br.Status().Routes[0].Holds; h == nil || h.Mode != relay.SharePartitions || !slices.Equal(h.Partitions, []int32{0, 1, 2, 3}) {
		t.Errorf("holds %+v; want partitions 0-3", h)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// A fresh reader gets the n messages once each, then the marker.
	publish(t, k, out, &relay.Message{ID: "end"})
	got := consume(t, k, "reader2", out, n+1)
	seen := map[string]int{}
	for _, m := range got {
		seen[m.ID]++
	}
	for _, m := range msgs {
		if seen[m.ID] != 1 {
			t.Errorf("%s forwarded %d times; want once", m.ID, seen[m.ID])
		}
	}
	if seen["end"] != 1 {
		t.Errorf("read %d messages before the marker; want %d", len(got)-1, n)
	}
	// The route's copies were written in transactions (the marker not).
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.TrimPrefix(k, "kafka://")), kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var txn, plain int
	for txn+plain < n+1 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fs := cl.PollFetches(ctx)
		err := ctx.Err()
		cancel()
		if err != nil {
			t.Fatalf("raw read of %s: %d transactional, %d plain records: %v", out, txn, plain, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Attrs.IsTransactional() {
				txn++
			} else {
				plain++
			}
		})
	}
	if txn != n || plain != 1 {
		t.Fatalf("%s holds %d transactional and %d plain records; want %d and the marker", out, txn, plain, n)
	}
}

// TestExactlyOnceRouteValidate: a kafka -> kafka route on one cluster
// with transactional_id= validates (two clusters: TestValidateGuarantee).
func TestExactlyOnceRouteValidate(t *testing.T) {
	src := `routes:
  - name: eo
    from: {url: "kafka://k:9092?transactional_id=bridge-1", topic: t, group: g}
    to: {url: "kafka://k:9092", topic: t2}
    guarantee: exactly-once
`
	if _, err := bridge.Parse([]byte(src), "b.yaml", nil); err != nil {
		t.Fatalf("Parse: %v", err)
	}
}

// TestExactlyOnceRouteTakenOver: two bridges run an exactly-once route
// with the same transactional_id (a misconfigured replica). The second
// one's registration fences the first, which cannot recover by opening a
// new pair (that would fence the other in turn, for ever): its Run returns
// ErrUnrecoverable naming the takeover, and its route's state says
// stopped, while the second forwards every message once.
func TestExactlyOnceRouteTakenOver(t *testing.T) {
	k := kafkaURL(t)
	in, out, txid := uniq("in"), uniq("out"), uniq("tx")
	newBridge := func() *bridge.Bridge {
		cfg := bridge.Config{Routes: []bridge.Route{{
			Name:      "eo",
			From:      bridge.Source{URL: k + "?transactional_id=" + txid, Topic: in, Group: "bridge"},
			To:        bridge.Destination{URL: k, Topic: out},
			Guarantee: relay.ExactlyOnce,
		}}}
		br, err := bridge.New(cfg, bridge.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return br
	}
	provision(t, k, "reader", out)
	batch := func(from, n int) []*relay.Message {
		var msgs []*relay.Message
		for i := from; i < from+n; i++ {
			msgs = append(msgs, &relay.Message{ID: fmt.Sprintf("m%d", i), Payload: []byte(fmt.Sprint(i))})
		}
		return msgs
	}
	publish(t, k, in, batch(0, 100)...)
	first := newBridge()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	consume(t, k, "reader", out, 100)
	stop := runBridge(t, newBridge()) // registers the same transactional_id
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for i := 100; err == nil; i += 10 {
		publish(t, k, in, batch(i, 10)...)
		select {
		case err = <-done:
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the fenced bridge still runs after 30s")
		}
	}
	if !errors.Is(err, bridge.ErrUnrecoverable) || !errors.Is(err, relay.ErrTakenOver) {
		t.Fatalf("fenced bridge's Run: %v; want ErrUnrecoverable and relay.ErrTakenOver", err)
	}
	if st := first.Status().Routes[0]; st.State != bridge.StateStopped || st.LastError == nil ||
		!strings.Contains(st.LastError.Message, "took over") {
		t.Fatalf("fenced bridge's route: state %s, last error %v; want stopped, naming the takeover", st.State, st.LastError)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
