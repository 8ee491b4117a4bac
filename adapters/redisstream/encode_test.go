package redisstream

import (
	"bytes"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/driver"
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
		if got.ID != m.ID || got.Key != m.Key || !bytes.Equal(got.Payload, m.Payload) || !equalMD(got.Metadata, m.Metadata) {
			t.Errorf("round trip of %+v gave %+v", m, got)
		}
		if n := encodedSize(m); n < driver.EncodedSize(m) {
			t.Errorf("encodedSize %d below the generic size %d", n, driver.EncodedSize(m))
		}
	}
}

func TestDecodeForeign(t *testing.T) {
	m := Decode("5-1", map[string]any{"value": "v", "message": "msg"})
	if m.ID != "5-1" || string(m.Payload) != "msg" || !equalMD(m.Metadata, relay.Metadata{"value": "v"}) {
		t.Errorf("preference order: %+v", m)
	}
	m = Decode("5-2", map[string]any{"n": int64(3)})
	if m.Metadata["n"] != "3" || m.Payload != nil {
		t.Errorf("non-string value: %+v", m)
	}
}

func equalMD(a, b relay.Metadata) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
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
