package mqtt

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	var a driver.Arena
	for _, m := range []*relay.Message{
		{ID: relay.NewID(), Payload: []byte("plain text")},
		{ID: relay.NewID(), Key: "k", Payload: []byte{0, 1, 2, 255}, Metadata: relay.Metadata{"a": "1", "": "empty name", "z": ""}},
		{ID: "non-uuid id", Payload: nil},
		{ID: relay.NewID(), Payload: []byte(Magic + "payload that begins with the prefix")},
		{ID: relay.NewID(), Metadata: relay.Metadata{"big": strings.Repeat("v", 300)}, Payload: bytes.Repeat([]byte{7}, 200)},
	} {
		wire := encode(m, EnvelopeAuto)
		if !bytes.HasPrefix(wire, []byte(Magic)) {
			t.Errorf("message %q went without envelope: %q", m.ID, wire)
		}
		if len(wire) != encodedSize(m, EnvelopeAuto) {
			t.Errorf("encodedSize %d, encoded %d bytes", encodedSize(m, EnvelopeAuto), len(wire))
		}
		got := decode(wire, &a)
		if got.ID != m.ID || got.Key != m.Key || !bytes.Equal(got.Payload, m.Payload) || len(got.Metadata) != len(m.Metadata) {
			t.Fatalf("decoded %+v, want %+v", got, m)
		}
		for k, v := range m.Metadata {
			if got.Metadata[k] != v {
				t.Errorf("metadata %q = %q, want %q", k, got.Metadata[k], v)
			}
		}
	}
}

// A message that carries nothing a subscriber cannot derive goes as its
// plain payload; decoding the plain payload gives it back whole.
func TestPlainWhenDerivable(t *testing.T) {
	var a driver.Arena
	p := []byte(`{"temperature":21.5}`)
	m := &relay.Message{ID: DerivedID(p), Payload: p}
	if wire := encode(m, EnvelopeAuto); !bytes.Equal(wire, p) {
		t.Fatalf("derivable message encoded as %q, want the plain payload", wire)
	}
	got := decode(p, &a)
	if got.ID != m.ID || got.Key != "" || got.Metadata != nil || !bytes.Equal(got.Payload, p) {
		t.Fatalf("plain payload decoded as %+v", got)
	}
	if DerivedID(p) != DerivedID(bytes.Clone(p)) || DerivedID(p) == DerivedID([]byte("other")) {
		t.Fatal("DerivedID is not a function of the payload")
	}
	if !isDerivedForm(DerivedID(nil)) || isDerivedForm(relay.NewID()) {
		t.Fatal("isDerivedForm tells derived IDs from UUIDv7s wrong")
	}
	// A key, metadata or another ID need the envelope.
	for _, other := range []*relay.Message{
		{ID: m.ID, Key: "k", Payload: p},
		{ID: m.ID, Metadata: relay.Metadata{"a": "b"}, Payload: p},
		{ID: relay.NewID(), Payload: p},
	} {
		if bytes.Equal(encode(other, EnvelopeAuto), p) {
			t.Errorf("%+v went plain", other)
		}
	}
	// envelope=never: always plain.
	if wire := encode(&relay.Message{ID: relay.NewID(), Payload: p}, EnvelopeNever); !bytes.Equal(wire, p) {
		t.Errorf("envelope=never encoded %q", wire)
	}
}

// A payload that begins with the prefix but does not read is delivered
// whole, with the problem in metadata and the derived ID.
func TestUndecodableEnvelope(t *testing.T) {
	var a driver.Arena
	good := encode(&relay.Message{ID: "id", Key: "key", Metadata: relay.Metadata{"a": "b"}, Payload: []byte("x")}, EnvelopeAuto)
	for _, p := range [][]byte{
		[]byte(Magic),
		[]byte(Magic + "\x02"),
		good[:len(Magic)+3],
		good[:len(good)-4],
		[]byte(Magic + "\x01\x00\x00\x00"), // no ID
	} {
		m := decode(p, &a)
		if m.Metadata[MetaDecodeError] == "" || !bytes.Equal(m.Payload, p) || m.ID != DerivedID(p) {
			t.Errorf("decode(%q) = %+v, want the raw payload with %s", p, m, MetaDecodeError)
		}
	}
}

// decode copies: the receiver's buffer is not the delivered payload.
func TestDecodeCopies(t *testing.T) {
	var a driver.Arena
	raw := encode(&relay.Message{ID: "id", Payload: []byte("payload")}, EnvelopeAuto)
	m := decode(raw, &a)
	m.Payload[0] = 'X'
	if again := decode(raw, &a); string(again.Payload) != "payload" {
		t.Fatalf("a change to a delivered payload reached the receiver's copy: %q", again.Payload)
	}
}

func TestValidateTopic(t *testing.T) {
	for _, ok := range []string{"a", "a/b/c", "/leading", "trailing/", "a//b", "ü/🌍"} {
		if err := validateTopic(ok); err != nil {
			t.Errorf("validateTopic(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/+/b", "a/#", "$SYS/x", "$share/g/t", "a\x00b", "\xff", strings.Repeat("a", 65536)} {
		if err := validateTopic(bad); !errors.Is(err, relay.ErrInvalidTopic) {
			t.Errorf("validateTopic(%q) = %v, want ErrInvalidTopic", bad, err)
		}
	}
}
