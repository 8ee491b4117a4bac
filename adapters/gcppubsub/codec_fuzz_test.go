package gcppubsub

import (
	"bytes"
	"maps"
	"testing"
	"unicode/utf8"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/go-relay/relay"
)

// FuzzDecode: decoding a delivery from any publisher never panics and
// loses nothing (every attribute but relay's own is metadata; a packed
// block that does not read leaves the data whole and says why); and a
// relay message made of the same inputs round-trips through encode and
// decode byte-exact.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("payload"), "5", "id-1", "key", "name", "value")
	f.Add([]byte{0, 1, 2}, "", "", "", "goog-x", "\xff")
	f.Add([]byte{1, 'x', 0}, "3", "\xfe", "k", "relay-id", "v")
	f.Fuzz(func(t *testing.T, data []byte, packed, id, key, name, value string) {
		attrs := map[string]string{name: value}
		if packed != "" {
			attrs[AttrPacked] = packed
		}
		m := decode(&pb.ReceivedMessage{Message: &pb.PubsubMessage{MessageId: "server-id", Data: data, Attributes: attrs, OrderingKey: key}})
		if _, bad := m.Metadata[MetaDecodeError]; bad && !bytes.Equal(m.Payload, data) {
			t.Fatalf("undecodable delivery: payload %q, want the data %q", m.Payload, data)
		}
		// The attribute keeps its name; a packed entry of the same name
		// would arrive as name#2.
		if got, ok := m.Metadata[name]; name != AttrID && name != AttrPacked && (!ok || got != value) {
			t.Fatalf("attribute %q=%q lost: metadata %q", name, value, m.Metadata)
		}

		if !utf8.ValidString(key) || len(key) > MaxOrderingKey || id == "" {
			return
		}
		in := &relay.Message{ID: id, Key: key, Payload: data, Metadata: relay.Metadata{name: value, "plain": "v"}}
		out := decode(&pb.ReceivedMessage{Message: encode(in)})
		if out.ID != in.ID || out.Key != in.Key || !bytes.Equal(out.Payload, in.Payload) || !maps.Equal(out.Metadata, in.Metadata) {
			t.Fatalf("round trip: got %q %q %q %q, want %q %q %q %q", out.ID, out.Key, out.Payload, out.Metadata, in.ID, in.Key, in.Payload, in.Metadata)
		}
	})
}
