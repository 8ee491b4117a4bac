package testenv

import (
	"net/url"
	"testing"
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
