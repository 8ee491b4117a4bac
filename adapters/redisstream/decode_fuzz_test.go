package redisstream

import (
	"slices"
	"strings"
	"testing"

	"github.com/go-relay/relay/driver"
)

// FuzzDecode feeds Decode stream entries as any XADD could write them:
// fields split from the fuzzed spec at '\n', name and value at '=', with
// values as strings, bytes, integers or nil (what go-redis may hand back),
// including relay's own field names. Decode must not panic and must
// deliver a message with an ID.
func FuzzDecode(f *testing.F) {
	f.Add("1700000000000-0", "id=abc\nkey=k\npayload=hello\nmd:x=1")
	f.Add("1-1", "payload=\nid=")
	f.Add("2-0", "body=foreign\nother=v\nmd:=\n=")
	f.Add("", "data=\xff\x00\nmd:md:x=y")
	f.Fuzz(func(t *testing.T, entryID, spec string) {
		fields := map[string]any{}
		if spec != "" {
			for i, line := range strings.Split(spec, "\n") {
				k, v, _ := strings.Cut(line, "=")
				switch i % 4 {
				case 0:
					fields[k] = v
				case 1:
					fields[k] = []byte(v)
				case 2:
					fields[k] = int64(len(v))
				default:
					if v == "" {
						fields[k] = nil
					} else {
						fields[k] = v
					}
				}
			}
		}
		m := Decode(entryID, fields)
		if m == nil {
			t.Fatal("Decode returned nil")
		}
		if _, hasID := fields[FieldID]; !hasID && m.ID != entryID {
			t.Fatalf("ID %q, want the entry ID %q", m.ID, entryID)
		}
	})
}

// FuzzDecodeFields feeds DecodeFields ordered field lists with repeated
// names: every value must be kept, as the ID, key, payload or one metadata
// entry each.
func FuzzDecodeFields(f *testing.F) {
	f.Add("a=1\na=2\nmd:a=3\na#2=4")
	f.Add("payload=p\npayload=q\nid=x\nid=y\nkey=k")
	f.Add("data=d\ndata=e\nbody=b")
	f.Fuzz(func(t *testing.T, spec string) {
		var fields []string
		for _, line := range strings.Split(spec, "\n") {
			k, v, _ := strings.Cut(line, "=")
			fields = append(fields, k, v)
		}
		m := DecodeFields("1-0", fields)
		kept := len(m.Metadata)
		payloadField := ""
		for _, name := range append([]string{FieldPayload}, ForeignPayloadFields...) {
			for i := 0; i < len(fields); i += 2 {
				if fields[i] == name && payloadField == "" {
					payloadField = name
				}
			}
			if payloadField != "" {
				break
			}
		}
		for _, name := range []string{FieldID, FieldKey, payloadField} {
			if name != "" && slices.Contains(everyOther(fields), name) {
				kept++
			}
		}
		if kept != len(fields)/2 {
			t.Fatalf("%q: %d values kept of %d: %+v", fields, kept, len(fields)/2, m)
		}
	})
}

func everyOther(f []string) []string {
	var names []string
	for i := 0; i < len(f); i += 2 {
		names = append(names, f[i])
	}
	return names
}

// FuzzParseStreams feeds the RESP parser arbitrary replies: it must not
// panic, and never return entries together with an error.
func FuzzParseStreams(f *testing.F) {
	f.Add([]byte("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"))
	f.Add([]byte("%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n_\r\n"))
	f.Add([]byte("*3\r\n$3\r\n0-0\r\n*0\r\n*0\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if got, err := parseStreams(raw, new(driver.Arena)); err != nil && got != nil {
			t.Fatalf("entries %v with error %v", got, err)
		}
		_, _, _ = parseAutoClaim(raw, nil)
	})
}
