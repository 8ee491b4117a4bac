//go:build faults

package faults

import (
	"net/url"
	"testing"
	"time"

	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The replica rows of the sources that share work as competing consumers
// (Redis Streams group + XAUTOCLAIM, RabbitMQ competing consumers, NATS
// durable consumer, PostgreSQL SKIP LOCKED, SQS): every route forwards to
// a Redis stream that the test reads. Leases are configured short so that a
// freeze costs seconds. One fault may duplicate at most what the faulty
// replica held: its window (replicaWindow), each message once.

// redisDst is the destination of these rows.
func redisDst(t *testing.T, c replicaCase) replicaCase {
	base := redisURL(t)
	c.dst = base
	c.reader = testenv.WithParams(base, "group", unique("reader"))
	c.guarantee = "at-least-once"
	c.overlap = replicaWindow
	return c
}

// competing runs every fault of c's row, the sources in parallel.
func competing(t *testing.T, mk func(t *testing.T) replicaCase) {
	t.Parallel()
	for _, fault := range []string{"kill", "freeze"} {
		t.Run(fault, func(t *testing.T) {
			start := time.Now()
			c := mk(t)
			o := runReplicas(t, c, fault)
			replicaRow(t, c, fault, start, o)
		})
	}
}

func TestReplicasRedis(t *testing.T) {
	competing(t, func(t *testing.T) replicaCase {
		base := redisURL(t)
		return redisDst(t, replicaCase{adapter: "redisstream", pub: base, lease: 2 * time.Second,
			src: testenv.WithParams(base, "group", unique("g"), "claim_idle", "2s", "claim_every", "500ms"),
			how: "claim_idle 2s: the other replicas XAUTOCLAIM what the faulty one held"})
	})
}

func TestReplicasRabbitMQ(t *testing.T) {
	competing(t, func(t *testing.T) replicaCase {
		base := amqpURL(t)
		return redisDst(t, replicaCase{adapter: "amqp", pub: base, lease: 3 * time.Second,
			src: testenv.WithParams(base, "group", unique("g"), "heartbeat", "1s"),
			how: "heartbeat 1s: the broker closes a silent connection after two missed heartbeats and requeues its unacked messages"})
	})
}

func TestReplicasNATS(t *testing.T) {
	base := testenv.NATS(t)
	withNATSCleanup(t, base, "rep-in")
	competing(t, func(t *testing.T) replicaCase {
		return redisDst(t, replicaCase{adapter: "nats", pub: base, lease: 2 * time.Second,
			src: testenv.WithParams(base, "group", unique("g"), "ack_wait", "2s"),
			how: "ack_wait 2s: the server redelivers what the faulty one held to the others"})
	})
}

func TestReplicasPostgres(t *testing.T) {
	competing(t, func(t *testing.T) replicaCase {
		base := pgURL(t)
		return redisDst(t, replicaCase{adapter: "postgres", pub: base, lease: 2 * time.Second,
			src: testenv.WithParams(base, "group", unique("g"), "lease", "2s"),
			how: "lease 2s: SKIP LOCKED claims rows whose lease expired"})
	})
}

func TestReplicasSQS(t *testing.T) {
	svc := sqsBase(t)
	competing(t, func(t *testing.T) replicaCase {
		return redisDst(t, replicaCase{adapter: "sqs (goaws)", pub: svc, lease: 3 * time.Second,
			src: testenv.WithParams(svc, "visibility", "3"),
			how: "visibility 3s: SQS makes what the faulty one held visible again"})
	})
}

// sqsBase is the sqs:// base URL of the goaws this test binary shares.
func sqsBase(t *testing.T) string { return sqsURLOf(netSQSService(t)) }

// sqsURLOf is the sqs:// base URL of svc.
func sqsURLOf(svc *testenv.SQSService) string {
	q := url.Values{}
	q.Set("region", svc.Region)
	if svc.Endpoint != "" {
		q.Set("endpoint", svc.Endpoint)
	}
	if svc.Emulated {
		q.Set("access_key_id", "test")
		q.Set("secret_key", "test")
	}
	return "sqs://?" + q.Encode()
}
