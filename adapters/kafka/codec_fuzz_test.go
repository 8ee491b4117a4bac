package kafka

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzDecodeRecord feeds decodeRecord records as any producer could write
// them: arbitrary key, value and headers (split from the fuzzed header
// blob at '\n', name and value at '='). It must never panic and always
// yields a message with an ID, since a foreign record is delivered as is,
// and it keeps every header: each one but the first relay-id becomes a
// metadata entry (repeated names numbered), plus the tombstone flag for a
// NULL value.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte("k"), []byte("payload"), "relay-id=abc\nrelay-md-relay-x=1\nplain=v", int32(0), int64(7))
	f.Add([]byte(nil), []byte(nil), "", int32(3), int64(0))
	f.Add([]byte{0xff, 0}, []byte{0, 1, 2}, "relay-id=\nrelay-md-=\n=\n\xff=\xfe", int32(-1), int64(-1))
	f.Fuzz(func(t *testing.T, key, value []byte, headers string, partition int32, offset int64) {
		r := &kgo.Record{Topic: "t", Key: key, Value: value, Partition: partition, Offset: offset}
		if headers != "" {
			for _, line := range strings.Split(headers, "\n") {
				k, v, _ := strings.Cut(line, "=")
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
		}
		m := decodeRecord(r)
		if m == nil {
			t.Fatal("decodeRecord returned nil")
		}
		if m.ID == "" && !hasEmptyIDHeader(r) {
			t.Fatalf("no ID for record %+v", r)
		}
		if string(m.Payload) != string(value) {
			t.Fatalf("payload %q, want %q", m.Payload, value)
		}
		want := len(r.Headers)
		if hasEmptyIDHeader(r) {
			want--
		}
		if r.Value == nil {
			want++
			if m.Metadata[MetadataTombstone] != "true" {
				t.Fatalf("NULL value without the tombstone flag: %v", m.Metadata)
			}
		}
		if len(m.Metadata) != want {
			t.Fatalf("%d metadata entries from %d headers (value nil: %v): %v", len(m.Metadata), len(r.Headers), r.Value == nil, m.Metadata)
		}
	})
}

func hasEmptyIDHeader(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == headerID {
			return true
		}
	}
	return false
}
