package mqtt_test

import (
	"os"
	"testing"

	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// TestConformance runs the suite against a mosquitto of its own, so that
// its Reconnect check can restart the broker (the shared one must not be
// restarted; the other tests of the package use it), and, when
// RELAY_TEST_MQTT_URL names a broker (another MQTT 3.1.1 broker with
// shared subscriptions), against that one too, without Reconnect.
func TestConformance(t *testing.T) {
	b := testenv.StartMosquitto(t)
	h := harnessFor(b.URL())
	h.Restart = func(testing.TB) { b.Restart(1) }
	drivertest.Run(t, h)
	if os.Getenv("RELAY_TEST_MQTT_URL") != "" {
		t.Run("External", func(t *testing.T) { drivertest.Run(t, harnessFor(mqttURL(t))) })
	}
}

// harnessFor is the suite's harness for the broker at base. max_bytes is
// small so that the Oversize check allocates little.
func harnessFor(base string) drivertest.Harness {
	base = testenv.WithParams(base, "max_bytes", "4MiB")
	return drivertest.Harness{
		NewTopic:      func(testing.TB) string { return newName("relay-test/") },
		PublisherURL:  base,
		SubscriberURL: func(group string) string { return testenv.WithParams(base, "group", group) },
		HungBroker: func(t testing.TB) drivertest.HungBroker {
			proxied, p := testenv.ProxyURL(t, base)
			return drivertest.HungBroker{
				PublisherURL:  proxied,
				SubscriberURL: func(group string) string { return testenv.WithParams(proxied, "group", group) },
				Hang:          p.Hang,
			}
		},
	}
}
