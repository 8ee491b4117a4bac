package testenv

import (
	"net/url"
	"testing"

	"go.uber.org/goleak"

	"github.com/go-relay/relay/driver/drivertest"
)

// ProxyURL starts a FaultProxy in front of the host:port of rawURL and
// returns rawURL pointing at the proxy instead, with the proxy. Query
// parameters that name other hosts (e.g. Kafka seeds, an SQS endpoint)
// are left as they are.
func ProxyURL(t testing.TB, rawURL string) (string, *FaultProxy) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("testenv: parsing %q: %v", rawURL, err)
	}
	if u.Host == "" {
		t.Fatalf("testenv: URL %q has no host to proxy", rawURL)
	}
	p := NewFaultProxy(t, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

// ProxyGoroutines are the goleak options that ignore toxiproxy's own
// goroutines: a proxy (the test's, not relay's) can leave a link's
// goroutine blocked for a moment after a toxic is removed as its
// connection closes, which says nothing about relay's clients. Pass them
// to goleak in every package whose tests use ProxyURL.
func ProxyGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/stream.(*ChanWriter).Write"),
	}
}

// GroupURL returns the func that adds group=G to base, as a
// drivertest.Harness's SubscriberURL takes it.
func GroupURL(base string) func(group string) string {
	return func(group string) string { return WithParams(base, "group", group) }
}

// HungBroker returns the drivertest.Harness.HungBroker hook of the broker
// at base: the URLs of a FaultProxy in front of it, whose Hang stops
// every byte.
func HungBroker(base string) func(t testing.TB) drivertest.HungBroker {
	return func(t testing.TB) drivertest.HungBroker {
		proxied, p := ProxyURL(t, base)
		return drivertest.HungBroker{PublisherURL: proxied, SubscriberURL: GroupURL(proxied), Hang: p.Hang}
	}
}
