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
		SubscriberURL: testenv.GroupURL(base),
		HungBroker:    testenv.HungBroker(base),
	}
	if why := local.CanRestart(t); why == "" {
		h.Restart = local.Restart
	} else {
		t.Logf("no Restart hook: %s", why)
	}
	drivertest.Run(t, h)
}
