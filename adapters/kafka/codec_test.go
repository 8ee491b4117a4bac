package kafka

import (
	"strconv"
	"testing"

	"github.com/go-relay/relay"
)

// TestHeaderNames checks the header name of each kind of metadata key,
// also past the bound of kept names, and that recordSize counts the
// reserved prefix it adds.
func TestHeaderNames(t *testing.T) {
	for _, tc := range []struct{ key, header string }{
		{"plain", "plain"},
		{"relay-hops", "relay-md-relay-hops"},
		{"relay-hops", "relay-md-relay-hops"}, // kept from the first
		{"relay-", "relay-md-relay-"},
		{"relay-md-x", "relay-md-relay-md-x"},
		{"", ""},
	} {
		if got := headerName(tc.key); got != tc.header {
			t.Errorf("headerName(%q) = %q, want %q", tc.key, got, tc.header)
		}
		if got := headerNameLen(tc.key); got != len(tc.header) {
			t.Errorf("headerNameLen(%q) = %d, want %d", tc.key, got, len(tc.header))
		}
	}
	for i := range reservedHeadersMax + 10 {
		k := "relay-made-up-" + strconv.Itoa(i)
		if got := headerName(k); got != "relay-md-"+k {
			t.Fatalf("headerName(%q) = %q after %d names", k, got, i)
		}
	}
	bare := &relay.Message{ID: "x", Payload: []byte("p")}
	with := &relay.Message{ID: "x", Payload: []byte("p"), Metadata: relay.Metadata{"relay-hops": "abc"}}
	if d, want := recordSize(with)-recordSize(bare), headerOverhead+len("relay-md-relay-hops")+len("abc"); d != want {
		t.Errorf("relay-hops=abc adds %d bytes to recordSize, want %d", d, want)
	}
}
