package redislist

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/go-relay/relay"
)

func TestEncodeRoundTrip(t *testing.T) {
	for _, m := range []*relay.Message{
		{ID: "id-1", Key: "k", Payload: []byte{0, 1, 2, 255}, Metadata: relay.Metadata{"a": "1", "": "empty name", "b": ""}},
		{ID: "id-2"},
		{ID: "id-3", Payload: []byte{}},
		{ID: "ключ", Key: "🔑", Payload: []byte("RLQ1 inside the payload")},
	} {
		raw := encode(m)
		got, attempt, err := decode(raw)
		if err != nil {
			t.Fatalf("%s: decode: %v", m.ID, err)
		}
		if attempt != 1 {
			t.Errorf("%s: attempt %d, want 1", m.ID, attempt)
		}
		if got.ID != m.ID || got.Key != m.Key || !bytes.Equal(got.Payload, m.Payload) || len(got.Metadata) != len(m.Metadata) {
			t.Errorf("%s: got %+v, want %+v", m.ID, got, m)
		}
		for k, v := range m.Metadata {
			if got.Metadata[k] != v {
				t.Errorf("%s: metadata %q = %q, want %q", m.ID, k, got.Metadata[k], v)
			}
		}
		if got.Payload == nil {
			t.Errorf("%s: nil payload, want a present empty one", m.ID)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good := encode(&relay.Message{ID: "x", Key: "k", Metadata: relay.Metadata{"a": "b"}, Payload: []byte("p")})
	for name, raw := range map[string][]byte{
		"empty":        nil,
		"foreign":      []byte(`{"id":"x"}`),
		"bad attempt":  append([]byte("RLQ1zzzzzzzz"), good[headerLen:]...),
		"truncated ID": good[:headerLen+1],
		"huge length":  append(append([]byte{}, good[:headerLen]...), binary.AppendUvarint(nil, 1<<40)...),
	} {
		if _, _, err := decode(raw); err == nil {
			t.Errorf("%s: decode succeeded, want an error", name)
		}
	}
}

// A foreign producer may repeat a metadata name; the first occurrence
// keeps it, the next ones become "<name>#2", ... (the project's rule).
func TestDecodeRepeatedNames(t *testing.T) {
	b := []byte(magic + "00000003")
	b = appendString(b, "id")
	b = appendString(b, "")
	b = binary.AppendUvarint(b, 4)
	for _, kv := range [][2]string{{"h", "1"}, {"h", "2"}, {"h#2", "taken"}, {"h", "3"}} {
		b = appendString(b, kv[0])
		b = appendString(b, kv[1])
	}
	m, attempt, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if attempt != 3 {
		t.Errorf("attempt %d, want 3", attempt)
	}
	want := relay.Metadata{"h": "1", "h#2": "2", "h#2#2": "taken", "h#3": "3"}
	if len(m.Metadata) != len(want) {
		t.Fatalf("metadata %q, want %q", m.Metadata, want)
	}
	for k, v := range want {
		if m.Metadata[k] != v {
			t.Errorf("metadata %q = %q, want %q (all: %q)", k, m.Metadata[k], v, m.Metadata)
		}
	}
}

func TestPoison(t *testing.T) {
	m := poison([]byte("junk"), errShort)
	if string(m.Payload) != "junk" || !strings.Contains(m.Metadata[decodeError], "ends early") || m.ID == "" {
		t.Errorf("poison message %+v", m)
	}
}
