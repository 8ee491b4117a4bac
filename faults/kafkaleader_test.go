//go:build faults

package faults

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay/internal/testkit/testenv"
)

// TestKafkaLeaderLost runs a three-broker kfake cluster, publishes a
// stream to a topic of three partitions (replication 3) while a consumer
// acks, and removes the broker leading partition 0 once a third is
// published: its listener closes, it leaves the cluster metadata and its
// partitions get new leaders. Producer and consumer must move to the new
// leaders by themselves; every ID must arrive.
func TestKafkaLeaderLost(t *testing.T) {
	const total = 600
	noLeaks(t)
	start := time.Now()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	base := "kafka://" + strings.Join(c.ListenAddrs()[:1], "") + "?seed=" + strings.Join(c.ListenAddrs()[1:], ",") +
		"&partitions=3&replication=3"
	s := openStream(t, netTarget{adapter: "kafka (kfake, 3 brokers)", pub: base,
		sub: testenv.WithParams(base, "group", unique("g"), "inflight", "64", "session_timeout", "6s")}, "faults-leader")
	var published atomic.Int64
	pubDone := make(chan int)
	go func() {
		pubDone <- publishAll(t, s.l, s.pub, s.topic, batchOf(total, 64, "leader"), 10, func(done int) {
			published.Store(int64(done))
			time.Sleep(5 * time.Millisecond) // keep the stream going through the move
		})
	}()
	waitFor(t, "a third published", 2*time.Minute, func() bool { return published.Load() >= total/3 })
	leader := c.LeaderFor(s.topic, 0)
	if err := c.RemoveNode(leader); err != nil {
		t.Fatalf("removing broker %d: %v", leader, err)
	}
	removed := time.Now()
	_, before, _, _ := s.l.counts()
	waitFor(t, "a delivery after the leader left", 2*time.Minute, func() bool { _, n, _, _ := s.l.counts(); return n > before })
	recovered := time.Since(removed)
	failures := <-pubDone
	r := s.finish("partition leader lost", fmt.Sprintf("broker %d (leader of partition 0 of 3, replication 3) removed after 1/3 published; %d Publish calls failed and were retried",
		leader, failures), 2*time.Minute)
	r.RecoverSeconds = seconds(recovered)
	record(t, r, start)
}
