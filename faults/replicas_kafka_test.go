//go:build faults

package faults

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay/internal/testkit/testenv"
)

// kafkaReplicaCase starts a 6-partition kfake cluster for one scenario.
func kafkaReplicaCase(t *testing.T, eo bool) replicaCase {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DefaultNumPartitions(6),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	base := "kafka://127.0.0.1:" + strconv.Itoa(port)
	params := []string{"group", unique("g"), "session_timeout", "2s", "heartbeat_interval", "200ms", "rebalance_timeout", "4s"}
	rc := replicaCase{
		adapter: "kafka (kfake)", pub: base, dst: base, ordered: true, lease: 2 * time.Second,
		reader: testenv.WithParams(base, "group", unique("reader"), "isolation", "read_committed"),
	}
	if eo {
		params = append(params, "transaction_timeout", "3s")
		rc.src = testenv.WithParams(base, params...) + "&transactional_id=${RELAY_FAULTS_TXID}"
		rc.guarantee = "exactly-once"
		rc.how = "session_timeout 2s, transaction_timeout 3s, one transactional_id per replica; read_committed reader"
	} else {
		rc.src = testenv.WithParams(base, params...)
		rc.guarantee = "at-least-once"
		// The overlap of an at-least-once kafka group: each join makes the
		// members that give partitions up forward again what they held on
		// them (at most a window each: one for the second replica's join,
		// two for the third's), and the killed member leaves its window and
		// its acked records whose asynchronous commit had not landed (at
		// most one more window).
		rc.overlap = 5 * replicaWindow
		rc.how = "session_timeout 2s; cooperative-sticky rebalance"
	}
	return rc
}

// eoFreezes is how many times the exactly-once freeze runs: whether the
// freeze falls inside a transaction (a fence) or between two (a plain
// rebalance) is chance, and both must hold.
const eoFreezes = 3

// TestReplicasKafka runs the replica faults on kfake clusters of their own,
// in parallel with the other sources' rows: kafka -> kafka exactly-once
// (the frozen replica's fence and rejoin) and at-least-once, and the
// scale-out scenario (one SIGKILLed, one added) with both.
func TestReplicasKafka(t *testing.T) {
	t.Parallel()
	for _, g := range []string{"exactly-once", "at-least-once"} {
		faults := []string{"kill", "freeze", "scale"}
		if g == "exactly-once" {
			for range eoFreezes - 1 {
				faults = append(faults, "freeze")
			}
		}
		for _, fault := range faults {
			t.Run(g+"/"+fault, func(t *testing.T) {
				start := time.Now()
				c := kafkaReplicaCase(t, g == "exactly-once")
				o := runReplicas(t, c, fault)
				replicaRow(t, c, fault, start, o)
			})
		}
	}
}
