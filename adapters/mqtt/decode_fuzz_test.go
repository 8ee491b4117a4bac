package mqtt

import (
	"bytes"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// FuzzDecode feeds arbitrary PUBLISH payloads, as any client could send
// them, through decode: it never panics, never loses the payload (a plain
// or undecodable payload is delivered whole, an envelope's payload is its
// tail), always gives an ID, and what it gives encodes and decodes again
// to the same message.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("plain"))
	f.Add([]byte(Magic))
	f.Add(encode(&relay.Message{ID: "i", Key: "k", Metadata: relay.Metadata{"a": "b", "c": ""}, Payload: []byte("p")}, EnvelopeAuto))
	f.Add([]byte(Magic + "\x01\x01i\x00\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, p []byte) {
		var a driver.Arena
		m := decode(p, &a)
		if m.ID == "" {
			t.Fatal("empty ID")
		}
		if !bytes.HasPrefix(p, []byte(Magic)) || m.Metadata[MetaDecodeError] != "" {
			if !bytes.Equal(m.Payload, p) {
				t.Fatalf("payload %q delivered as %q", p, m.Payload)
			}
			return
		}
		if !bytes.HasSuffix(p, m.Payload) {
			t.Fatalf("envelope payload %q is not the tail of %q", m.Payload, p)
		}
		again := decode(encode(m, EnvelopeAuto), &a)
		if again.ID != m.ID || again.Key != m.Key || !bytes.Equal(again.Payload, m.Payload) || len(again.Metadata) != len(m.Metadata) {
			t.Fatalf("re-encoded %+v decodes as %+v", m, again)
		}
		for k, v := range m.Metadata {
			if again.Metadata[k] != v {
				t.Fatalf("metadata %q: %q, then %q", k, v, again.Metadata[k])
			}
		}
	})
}
