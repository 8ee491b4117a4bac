package redisstream_test

import (
	"testing"

	"go.uber.org/goleak"

	_ "github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.ProxyGoroutines()...) }

func TestConformance(t *testing.T) {
	base := redisURL(t)
	h := drivertest.Harness{
		PublisherURL:  base,
		SubscriberURL: testenv.GroupURL(base),
		HungBroker:    testenv.HungBroker(base),
	}
	if why := canRestart(t); why == "" {
		h.Restart = restartRedis
	} else {
		t.Logf("no Restart hook: %s", why)
	}
	drivertest.Run(t, h)
}
