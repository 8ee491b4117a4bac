package redisstream

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// fields turns Encode's pairs into the map go-redis hands to Decode.
func fields(pairs []any) map[string]any {
	m := map[string]any{}
	for i := 0; i < len(pairs); i += 2 {
		v := pairs[i+1]
		if b, ok := v.([]byte); ok {
			v = string(b)
		}
		m[pairs[i].(string)] = v
	}
	return m
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	cases := []*relay.Message{
		{ID: "a"},
		{ID: "b", Key: "k", Payload: []byte{0, 1, 2, 255}},
		{ID: "c", Payload: []byte("p"), Metadata: relay.Metadata{"x": "1", "md:y": "2", "id": "not the id", "payload": "not the payload", "": "empty name"}},
	}
	for _, m := range cases {
		got := Decode("1-0", fields(Encode(m)))
		if got.ID != m.ID || got.Key != m.Key || !bytes.Equal(got.Payload, m.Payload) || !maps.Equal(got.Metadata, m.Metadata) {
			t.Errorf("round trip of %+v gave %+v", m, got)
		}
		if n := encodedSize(m); n < driver.EncodedSize(m) {
			t.Errorf("encodedSize %d below the generic size %d", n, driver.EncodedSize(m))
		}
	}
}

func TestDecodeForeign(t *testing.T) {
	m := Decode("5-1", map[string]any{"value": "v", "message": "msg"})
	if m.ID != "5-1" || string(m.Payload) != "msg" || !maps.Equal(m.Metadata, relay.Metadata{"value": "v"}) {
		t.Errorf("preference order: %+v", m)
	}
	m = Decode("5-2", map[string]any{"n": int64(3)})
	if m.Metadata["n"] != "3" || m.Payload == nil || len(m.Payload) != 0 {
		t.Errorf("non-string value: %+v", m)
	}
}

func TestParseVersion(t *testing.T) {
	for _, c := range []struct {
		info string
		v    version
		old  bool
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", version{7, 0}, false},
		{"redis_version:6.2.0\r\n", version{6, 2}, false},
		{"redis_version:6.0.16\r\n", version{6, 0}, true},
		{"redis_version:5.0.7\r\n", version{5, 0}, true},
	} {
		v, _, ok := parseVersion(c.info)
		if !ok || v != c.v || v.less(version{6, 2}) != c.old {
			t.Errorf("%q: %v %v", c.info, v, ok)
		}
	}
	if _, _, ok := parseVersion("# Server\r\n"); ok {
		t.Error("no version line parsed as a version")
	}
}

// Repeated fields (which XADD allows) lose nothing: the first occurrence is
// used as relay would, later ones become metadata <name>#2, #3, ...,
// skipping numbers already taken in the entry.
func TestDecodeFieldsRepeated(t *testing.T) {
	cases := []struct {
		fields  []string
		id, key string
		payload string
		md      relay.Metadata
	}{
		{[]string{"a", "1", "a", "2", "a", "3"}, "9-0", "", "", relay.Metadata{"a": "1", "a#2": "2", "a#3": "3"}},
		{[]string{"payload", "p1", "payload", "p2"}, "9-0", "", "p1", relay.Metadata{"payload#2": "p2"}},
		{[]string{"id", "first", "key", "k1", "payload", "", "id", "second", "key", "k2"}, "first", "k1", "", relay.Metadata{"id#2": "second", "key#2": "k2"}},
		{[]string{"md:x", "1", "md:x", "2", "x", "3"}, "9-0", "", "", relay.Metadata{"x": "1", "x#2": "2", "x#3": "3"}},
		// An explicit x#2 keeps its name; the repeat takes the next free number.
		{[]string{"x", "1", "x", "2", "md:x#2", "explicit"}, "9-0", "", "", relay.Metadata{"x": "1", "x#2": "explicit", "x#3": "2"}},
		// A foreign payload field repeated: the first is the payload.
		{[]string{"data", "d1", "data", "d2", "body", "b"}, "9-0", "", "d1", relay.Metadata{"data#2": "d2", "body": "b"}},
		// A trailing name without a value is ignored.
		{[]string{"payload", "p", "dangling"}, "9-0", "", "p", nil},
	}
	for _, c := range cases {
		m := DecodeFields("9-0", c.fields)
		if m.ID != c.id || m.Key != c.key || string(m.Payload) != c.payload || !maps.Equal(m.Metadata, c.md) {
			t.Errorf("%q: got ID %q key %q payload %q md %q; want %q %q %q %q", c.fields, m.ID, m.Key, m.Payload, m.Metadata, c.id, c.key, c.payload, c.md)
		}
		// The receiver's []byte instantiation decodes the same.
		bs := make([][]byte, len(c.fields))
		for i, f := range c.fields {
			bs[i] = []byte(f)
		}
		for _, a := range []*driver.Arena{nil, new(driver.Arena)} {
			if b := decode("9-0", bs, a); b.ID != m.ID || b.Key != m.Key || !bytes.Equal(b.Payload, m.Payload) || !maps.Equal(b.Metadata, m.Metadata) {
				t.Errorf("%q: []byte decode (arena %v) %+v differs from string decode %+v", c.fields, a != nil, b, m)
			}
		}
	}
}

// The RESP parser reads XREADGROUP and XAUTOCLAIM replies in both protocol
// versions, keeping repeated fields, and turns error replies into errors.
func TestParseReplies(t *testing.T) {
	entry := "*2\r\n$3\r\n1-0\r\n*6\r\n$7\r\npayload\r\n$2\r\nhi\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\na\r\n$1\r\n2\r\n"
	deleted := "*2\r\n$3\r\n2-0\r\n*-1\r\n"
	for name, raw := range map[string]string{
		"resp2": "*1\r\n*2\r\n$1\r\ns\r\n*2\r\n" + entry + deleted,
		"resp3": "%1\r\n$1\r\ns\r\n*2\r\n" + entry + strings.Replace(deleted, "*-1", "_", 1),
	} {
		got, err := parseStreams([]byte(raw), new(driver.Arena))
		if err != nil || len(got) != 2 {
			t.Fatalf("%s: %v %v", name, got, err)
		}
		if m := got[0].msg; got[0].id != "1-0" || string(m.Payload) != "hi" || !maps.Equal(m.Metadata, relay.Metadata{"a": "1", "a#2": "2"}) {
			t.Errorf("%s: entry %+v", name, m)
		}
		if got[1].id != "2-0" || got[1].msg != nil {
			t.Errorf("%s: deleted entry %+v", name, got[1])
		}
	}
	for _, raw := range []string{"*-1\r\n", "_\r\n"} {
		if got, err := parseStreams([]byte(raw), nil); err != nil || len(got) != 0 {
			t.Errorf("null reply %q: %v %v", raw, got, err)
		}
	}
	cur, got, err := parseAutoClaim([]byte("*3\r\n$3\r\n5-0\r\n*1\r\n"+entry+"*1\r\n$3\r\n3-0\r\n"), new(driver.Arena))
	if err != nil || cur != "5-0" || len(got) != 1 || got[0].msg.Metadata["a#2"] != "2" {
		t.Errorf("XAUTOCLAIM: %q %+v %v", cur, got, err)
	}
	if _, err := parseStreams([]byte("-NOGROUP No such key\r\n"), nil); !noGroup(err) {
		t.Errorf("error reply gave %v", err)
	}
	for _, bad := range []string{"*1\r\n*2\r\n$1\r\ns", "*1\r\n*2\r\n$9\r\ns\r\n", ":3\r\n"} {
		if _, err := parseStreams([]byte(bad), nil); err == nil {
			t.Errorf("malformed reply %q parsed", bad)
		}
	}
}

// A bogus length in a reply is an error, not a huge allocation.
func TestParseHugeLength(t *testing.T) {
	if _, err := parseStreams([]byte("*1\r\n*2\r\n$1\r\ns\r\n*999999999999999999\r\n"), nil); err == nil {
		t.Error("bogus entry count parsed")
	}
}

// What a parsed message keeps is a copy, not a slice of the raw reply: a
// message the application holds must not keep the whole reply (every
// entry of one read) in memory, nor change when the buffer is reused.
// That holds with and without an arena.
func TestParsedPayloadIsACopy(t *testing.T) {
	for _, a := range []*driver.Arena{nil, new(driver.Arena)} {
		raw := []byte("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*8\r\n$2\r\nid\r\n$2\r\nm1\r\n$3\r\nkey\r\n$1\r\nk\r\n$7\r\npayload\r\n$5\r\nhello\r\n$4\r\nmd:t\r\n$1\r\nv\r\n")
		got, err := parseStreams(raw, a)
		if err != nil || len(got) != 1 || string(got[0].msg.Payload) != "hello" {
			t.Fatalf("parseStreams (arena %v): %+v %v", a != nil, got, err)
		}
		for i := range raw {
			raw[i] = 'x'
		}
		e := got[0]
		if p := e.msg.Payload; string(p) != "hello" {
			t.Errorf("arena %v: payload %q changed with the raw reply: it shares its memory", a != nil, p)
		}
		if e.id != "1-0" || e.msg.ID != "m1" || e.msg.Key != "k" || !maps.Equal(e.msg.Metadata, relay.Metadata{"t": "v"}) {
			t.Errorf("arena %v: entry %q, message %q/%q/%v changed with the raw reply", a != nil, e.id, e.msg.ID, e.msg.Key, e.msg.Metadata)
		}
	}
}
