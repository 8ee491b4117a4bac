package postgres_test

import (
	"testing"

	_ "github.com/go-relay/relay/adapters/postgres"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestConformance(t *testing.T) {
	base := pgURL(t)
	h := drivertest.Harness{
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
	if why := local.CanRestart(t); why == "" {
		h.Restart = local.Restart
	} else {
		t.Logf("no Restart hook: %s", why)
	}
	drivertest.Run(t, h)
}
