// Package testenv finds the brokers that integration tests need.
//
// Each broker has an environment variable that points the tests at it and a
// default for the development machine. When a broker is unreachable the
// test fails under CI (CI=true) or when RELAY_REQUIRE_BROKERS=1, and is
// skipped with the reason printed otherwise: never silently.
package testenv

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// Broker addresses. Each is overridable by the environment variable named
// in its doc.
const (
	// RELAY_TEST_REDIS_URL
	DefaultRedisURL = "redis://127.0.0.1:6379/0"
	// RELAY_TEST_AMQP_URL
	DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	// RELAY_TEST_POSTGRES_URL (trust authentication for user postgres
	// on the development machine and in CI)
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test"
	// RELAY_TEST_NATS_URL (a nats-server with JetStream enabled, -js)
	DefaultNATSURL = "nats://127.0.0.1:4222"
	// RELAY_TEST_MQTT_URL (Mosquitto 2 or another MQTT 3.1.1 broker with
	// shared subscriptions)
	DefaultMQTTURL = "mqtt://127.0.0.1:1883"
)

// Required reports whether a missing broker must fail the test.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("RELAY_REQUIRE_BROKERS") == "1"
}

// URL returns the value of env or def.
func URL(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// Reachable dials the host:port of rawURL.
func Reachable(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	host := u.Host
	if u.Port() == "" {
		switch u.Scheme {
		case "redis", "rediss":
			host = net.JoinHostPort(u.Hostname(), "6379")
		case "amqp":
			host = net.JoinHostPort(u.Hostname(), "5672")
		case "amqps":
			host = net.JoinHostPort(u.Hostname(), "5671")
		case "postgres", "postgresql":
			host = net.JoinHostPort(u.Hostname(), "5432")
		case "nats":
			host = net.JoinHostPort(u.Hostname(), "4222")
		case "mqtt":
			host = net.JoinHostPort(u.Hostname(), "1883")
		case "mqtts":
			host = net.JoinHostPort(u.Hostname(), "8883")
		}
	}
	c, err := net.DialTimeout("tcp", host, 3*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// Need returns the broker URL from env (or def) after checking that it is
// reachable; otherwise it fails (CI) or skips (local) the test, saying why.
func Need(t testing.TB, name, env, def string) string {
	t.Helper()
	u := URL(env, def)
	if err := Reachable(u); err != nil {
		if Required() {
			t.Fatalf("%s is required but unreachable at %s (set %s): %v", name, u, env, err)
		}
		t.Skipf("SKIP: %s unreachable at %s (set %s, or run the README's test command which starts it): %v", name, u, env, err)
	}
	return u
}

// Redis returns the Redis URL for tests.
func Redis(t testing.TB) string { return Need(t, "Redis", "RELAY_TEST_REDIS_URL", DefaultRedisURL) }

// AMQP returns the RabbitMQ URL for tests.
func AMQP(t testing.TB) string { return Need(t, "RabbitMQ", "RELAY_TEST_AMQP_URL", DefaultAMQPURL) }

// Postgres returns the PostgreSQL URL for tests.
func Postgres(t testing.TB) string {
	return Need(t, "PostgreSQL", "RELAY_TEST_POSTGRES_URL", DefaultPostgresURL)
}

// NATS returns the NATS (JetStream) URL for tests.
func NATS(t testing.TB) string { return Need(t, "NATS", "RELAY_TEST_NATS_URL", DefaultNATSURL) }

// MQTT returns the MQTT broker URL for tests.
func MQTT(t testing.TB) string { return Need(t, "MQTT", "RELAY_TEST_MQTT_URL", DefaultMQTTURL) }
