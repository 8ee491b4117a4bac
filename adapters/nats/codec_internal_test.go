package nats

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"testing"

	natsgo "github.com/nats-io/nats.go"

	"github.com/go-relay/relay"
)

// wire sends msg's headers through nats.go's own encoder and parser, as
// the server hands them on.
func wire(t *testing.T, msg *natsgo.Msg) natsgo.Header {
	t.Helper()
	raw, err := headerBytes(msg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := natsgo.DecodeHeadersMsg(raw)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// headerBytes is the header block nats.go writes for msg.
func headerBytes(msg *natsgo.Msg) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("NATS/1.0\r\n")
	for k, vs := range msg.Header {
		for _, v := range vs {
			if !headerSafeName(k) || strings.TrimSpace(v) != v || strings.ContainsAny(v, "\r\n") {
				return nil, fmt.Errorf("header %q: %q would not survive nats.go", k, v)
			}
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString("\r\n")
	return b.Bytes(), nil
}

func TestCodecRoundTripIsByteExact(t *testing.T) {
	m := &relay.Message{
		ID:  " id with\r\nnewline\x00",
		Key: "ключ:\tkey ",
		Metadata: relay.Metadata{
			"plain":           "value",
			"":                "empty name",
			"with space":      " leading space",
			"colon:name":      "v",
			"utf8-ü":          "wert-ä",
			"trailing":        "ends in space ",
			"empty":           "",
			"crlf":            "a\r\nb",
			"Nats-Msg-Id":     "not the ID",
			"Relay-Key":       "not the key",
			"binary\xff\x00":  "\xfe\x01",
			"Relay-M-trick":   "nested prefix",
			"Relay-Mx-trick2": "nested prefix",
			"a/b(c)":          "forbidden name characters",
			"ce-id":           "plain header",
			"ce-subject":      " not header-safe",
			"ce-":             "",
		},
		Payload: []byte{0, 1, 2, 0xff},
	}
	msg := encode("orders.created", m)
	got := decode(wire(t, msg), msg.Data, "S", 7)
	if got.ID != m.ID || got.Key != m.Key || !bytes.Equal(got.Payload, m.Payload) || !reflect.DeepEqual(got.Metadata, m.Metadata) {
		t.Fatalf("round trip changed the message:\n got %q %q %q %q\nwant %q %q %q %q", got.ID, got.Key, got.Metadata, got.Payload, m.ID, m.Key, m.Metadata, m.Payload)
	}
	if size, raw := encodedSize(m), mustLen(t, msg); size != raw {
		t.Errorf("encodedSize = %d, the encoded message is %d bytes", size, raw)
	}
}

// TestCloudEventsHeadersArePlain: metadata named ce-... or Content-Type is
// the header of that name (the CloudEvents NATS binding), so that other CloudEvents
// consumers read it; a value that is not header-safe still goes base64.
func TestCloudEventsHeadersArePlain(t *testing.T) {
	m := &relay.Message{ID: "e1", Metadata: relay.Metadata{
		"ce-specversion": "1.0", "ce-id": "e1", "ce-subject": "a%20b", "ce-bad": " x", "other": "y",
		"Content-Type": "application/cloudevents+json; charset=UTF-8", "content-type": "lower case is other metadata"}}
	h := wire(t, encode("s", m))
	for _, k := range []string{"ce-specversion", "ce-id", "ce-subject", "Content-Type"} {
		if h.Get(k) != m.Metadata[k] {
			t.Errorf("header %s = %q, want %q (headers %v)", k, h.Get(k), m.Metadata[k], h)
		}
	}
	if _, ok := h["ce-bad"]; ok {
		t.Error("a value with a leading blank was written as a plain header")
	}
	if h.Get(MetaPrefix+"other") != "y" || h.Get(MetaPrefix+"content-type") == "" {
		t.Errorf("other metadata not under %s: %v", MetaPrefix, h)
	}
	if got := decode(h, nil, "S", 1); !reflect.DeepEqual(got.Metadata, m.Metadata) {
		t.Errorf("decoded metadata %q, want %q", got.Metadata, m.Metadata)
	}
}

func mustLen(t *testing.T, msg *natsgo.Msg) int {
	t.Helper()
	raw, err := headerBytes(msg)
	if err != nil {
		t.Fatal(err)
	}
	return len(raw) + len(msg.Data)
}

func TestCodecEmptyAndNilPayload(t *testing.T) {
	for _, p := range [][]byte{nil, {}} {
		msg := encode("t", &relay.Message{ID: "x", Payload: p})
		if msg.Data == nil || len(msg.Data) != 0 {
			t.Fatalf("payload %v written as %v, want a present 0-byte payload", p, msg.Data)
		}
		if got := decode(wire(t, msg), nil, "S", 1); got.Payload == nil || len(got.Payload) != 0 {
			t.Fatalf("absent payload read as %v, want empty non-nil", got.Payload)
		}
	}
}

func TestDecodeForeignHeaders(t *testing.T) {
	h := natsgo.Header{
		"Trace":       {"a", "b", "c"},
		"Trace#2":     {"taken"},
		"Nats-Msg-Id": {"first", "second"},
		"Relay-M-x":   {"1", "2"},
		"Single":      {"s"},
	}
	got := decode(h, []byte("p"), "STREAM", 9)
	want := relay.Metadata{
		"Trace": "a", "Trace#2": "taken", "Trace#3": "b", "Trace#4": "c",
		"Nats-Msg-Id#2": "second",
		"Relay-M-x":     "1", "Relay-M-x#2": "2",
		"Single": "s",
	}
	if got.ID != "first" {
		t.Errorf("ID = %q, want the first Nats-Msg-Id", got.ID)
	}
	if !reflect.DeepEqual(got.Metadata, want) {
		t.Errorf("metadata = %q\nwant %q", got.Metadata, want)
	}
	if got := decode(natsgo.Header{"X": {"y"}}, nil, "STREAM", 9); got.ID != "nats:STREAM:9" {
		t.Errorf("ID of a message without Nats-Msg-Id = %q, want nats:STREAM:9", got.ID)
	}
}

func TestNames(t *testing.T) {
	if got := StreamName("orders"); got != "relay_orders" {
		t.Errorf("StreamName(orders) = %q", got)
	}
	a, b := StreamName("orders.created"), StreamName("orders_created")
	if a == b {
		t.Errorf("orders.created and orders_created share stream %q", a)
	}
	if b != "relay_orders_created" {
		t.Errorf("StreamName(orders_created) = %q", b)
	}
	long := StreamName(string(bytes.Repeat([]byte("x"), 300)))
	if len(long) > maxNameLen {
		t.Errorf("StreamName of a long topic is %d characters", len(long))
	}
	if got := StreamName("a.b"); got != "relay_a_b_"+hexSHA("a.b")[:12] {
		t.Errorf("StreamName(a.b) = %q, want relay_a_b_ and the topic's SHA-256 prefix", got)
	}
	for _, bad := range []string{"", "a..b", ".a", "a.", "a b", "a.*", "a.>", "$JS.API"} {
		if err := validateTopic(bad); err == nil {
			t.Errorf("validateTopic(%q) = nil", bad)
		}
	}
	if err := validateTopic("orders.created-v1"); err != nil {
		t.Errorf("validateTopic: %v", err)
	}
}

func hexSHA(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
