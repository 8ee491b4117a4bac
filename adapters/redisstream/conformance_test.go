package redisstream_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/go-relay/relay/adapters/adaptertest"
	_ "github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.ProxyGoroutines()...) }

func TestConformance(t *testing.T) {
	base := redisURL(t)
	h := adaptertest.Harness{
		PublisherURL:  base,
		SubscriberURL: func(group string) string { return testenv.WithParams(base, "group", group) },
		HungBroker: func(t testing.TB) adaptertest.HungBroker {
			proxied, p := testenv.ProxyURL(t, base)
			return adaptertest.HungBroker{
				PublisherURL:  proxied,
				SubscriberURL: func(group string) string { return testenv.WithParams(proxied, "group", group) },
				Hang:          p.Hang,
			}
		},
	}
	if why := canRestart(t); why == "" {
		h.Restart = restartRedis
	} else {
		t.Logf("no Restart hook: %s", why)
	}
	adaptertest.Run(t, h)
}
