package redisstream

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-relay/relay/driver"
)

// BenchmarkParseStreams parses an XREADGROUP reply of 256 entries as
// relay writes them (an ID field and a 100-byte payload), through the
// receiver's arena: the adapter's own CPU per message on the read path.
func BenchmarkParseStreams(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("*1\r\n*2\r\n$5\r\nbench\r\n*256\r\n")
	payload := strings.Repeat("x", 100)
	for i := range 256 {
		id := fmt.Sprintf("1700000000000-%d", i)
		fmt.Fprintf(&sb, "*2\r\n$%d\r\n%s\r\n*4\r\n$2\r\nid\r\n$36\r\n%s\r\n$7\r\npayload\r\n$100\r\n%s\r\n", len(id), id, "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", payload)
	}
	raw := []byte(sb.String())
	var a driver.Arena
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		got, err := parseStreams(raw, &a)
		if err != nil || len(got) != 256 {
			b.Fatal(len(got), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*256), "ns/entry")
}
