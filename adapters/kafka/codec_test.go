package kafka

import (
	"strconv"
	"strings"
	"testing"

	"github.com/go-relay/relay"
)

// TestHeaderNames checks the header name of each kind of metadata key,
// that a reserved one is built once and then kept, that past the bound of
// kept names (and for long keys) names are still right but not kept, and
// that recordSize counts the reserved prefix it adds.
func TestHeaderNames(t *testing.T) {
	// From an empty cache, whatever other tests of the package encoded.
	reset := func() {
		reservedHeaders.names.Clear()
		reservedHeaders.n.Store(0)
	}
	reset()
	t.Cleanup(reset)
	for _, tc := range []struct{ key, header string }{
		{"plain", "plain"},
		{"relay-hops", "relay-md-relay-hops"},
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
	if h, ok := reservedHeaders.names.Load("relay-hops"); !ok || h != "relay-md-relay-hops" {
		t.Errorf("relay-hops kept as %v, %v", h, ok)
	}
	if n := testing.AllocsPerRun(100, func() { _ = headerName("relay-hops") }); n != 0 {
		t.Errorf("headerName of a kept key allocates %v times", n)
	}
	long := "relay-" + strings.Repeat("x", reservedHeaderMaxLen)
	if got := headerName(long); got != "relay-md-"+long {
		t.Errorf("headerName of a %d-byte key = %q", len(long), got)
	}
	if _, ok := reservedHeaders.names.Load(long); ok {
		t.Errorf("a %d-byte key was kept", len(long))
	}
	for i := range reservedHeadersMax + 10 {
		k := "relay-made-up-" + strconv.Itoa(i)
		if got := headerName(k); got != "relay-md-"+k {
			t.Fatalf("headerName(%q) = %q after %d names", k, got, i)
		}
	}
	kept := 0
	reservedHeaders.names.Range(func(any, any) bool { kept++; return true })
	if kept > reservedHeadersMax {
		t.Errorf("%d names kept, the bound is %d", kept, reservedHeadersMax)
	}
	bare := &relay.Message{ID: "x", Payload: []byte("p")}
	with := &relay.Message{ID: "x", Payload: []byte("p"), Metadata: relay.Metadata{"relay-hops": "abc"}}
	if d, want := recordSize(with)-recordSize(bare), headerOverhead+len("relay-md-relay-hops")+len("abc"); d != want {
		t.Errorf("relay-hops=abc adds %d bytes to recordSize, want %d", d, want)
	}
}
