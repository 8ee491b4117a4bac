package testenv

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// KafkaBrokers returns the seed brokers of the real Kafka cluster named by
// RELAY_TEST_KAFKA_BROKERS (comma-separated host:port), or nil when the
// variable is unset: Kafka tests then start an in-process kfake cluster, so
// they never depend on a broker being installed. A cluster that is named
// but unreachable fails the test under CI (or RELAY_REQUIRE_BROKERS=1) and
// skips it otherwise.
func KafkaBrokers(t testing.TB) []string {
	t.Helper()
	v := os.Getenv("RELAY_TEST_KAFKA_BROKERS")
	if v == "" {
		return nil
	}
	var brokers []string
	for _, b := range strings.Split(v, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		t.Fatalf("RELAY_TEST_KAFKA_BROKERS=%q names no broker", v)
	}
	c, err := net.DialTimeout("tcp", brokers[0], 3*time.Second)
	if err != nil {
		if Required() {
			t.Fatalf("Kafka is required but unreachable at %s (RELAY_TEST_KAFKA_BROKERS): %v", brokers[0], err)
		}
		t.Skipf("SKIP: Kafka unreachable at %s (RELAY_TEST_KAFKA_BROKERS; unset it to use the in-process kfake cluster): %v", brokers[0], err)
	}
	_ = c.Close()
	return brokers
}
