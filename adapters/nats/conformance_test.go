package nats_test

import (
	"testing"

	"go.uber.org/goleak"

	_ "github.com/go-relay/relay/adapters/nats"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.ProxyGoroutines()...) }

func TestConformance(t *testing.T) {
	h := harnessFor(t, natsURL(t))
	t.Log("no Restart hook: this server is shared with other tests; TestConformancePrivateServer runs the Reconnect check against a server of its own")
	drivertest.Run(t, h)
}

// harnessFor is the suite's harness for the server at base.
func harnessFor(t *testing.T, base string) drivertest.Harness {
	return drivertest.Harness{
		// Fresh topics as the suite's default, whose streams are deleted
		// when the check ends.
		NewTopic: func(t testing.TB) string {
			topic := newName("relay-test-")
			t.Cleanup(func() { deleteStreamOf(base, topic) })
			return topic
		},
		PublisherURL:  base,
		SubscriberURL: testenv.GroupURL(base),
		HungBroker:    testenv.HungBroker(base),
	}
}
