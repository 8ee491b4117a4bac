package gcppubsub_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	_ "github.com/go-relay/relay/adapters/gcppubsub"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/pubsubfake"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakOptions()...) }

// leakOptions are the goroutines that are not relay's: those the client
// library starts once per process (OpenCensus's stats worker) or leaves
// behind its streaming subscriber, which the interop and benchmark tests
// use directly (a keep-alive loop that ends on its next tick; relay does
// not use that subscriber), and those of the fake and the fault proxy.
func leakOptions() []goleak.Option {
	return append(append(testenv.ProxyGoroutines(), pubsubfake.Goroutines()...),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
		goleak.IgnoreAnyFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).pingStream"),
		goleak.IgnoreAnyFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).checkServer"))
}

// TestConformance runs the suite against a pstest fake of its own (whose
// Restart keeps its state, as the service does through an outage), or
// against the project of RELAY_TEST_GCP_PROJECT (then without the
// Reconnect and HungBrokerClose checks, which need a server to restart
// and to put behind a proxy).
func TestConformance(t *testing.T) {
	base, srv := pubsubfake.Base(t)
	tg := target{base, srv}
	h := drivertest.Harness{
		NewTopic:       func(t testing.TB) string { return tg.topic(t, "relay-test-") },
		PublisherURL:   base,
		SubscriberURL:  testenv.GroupURL(base),
		ReceiveTimeout: 20 * time.Second,
		HungBrokerSkip: "a real project (RELAY_TEST_GCP_PROJECT) cannot be put behind a local proxy",
		// The fake runs in this process: its goroutines are not relay's.
		IgnoreGoroutines: pubsubfake.Goroutines(),
	}
	if srv != nil {
		h.Restart = func(t testing.TB) {
			if err := srv.Restart(500 * time.Millisecond); err != nil {
				t.Fatalf("restarting the fake: %v", err)
			}
		}
		h.HungBroker = func(t testing.TB) drivertest.HungBroker {
			p := testenv.NewFaultProxy(t, srv.Addr)
			proxied := "gcppubsub://relay-test?emulator=" + p.Addr()
			return drivertest.HungBroker{
				PublisherURL:  proxied,
				SubscriberURL: func(group string) string { return testenv.WithParams(proxied, "group", group) },
				Hang:          p.Hang,
			}
		}
	}
	drivertest.Run(t, h)
}
