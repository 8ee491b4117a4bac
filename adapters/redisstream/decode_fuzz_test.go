package redisstream

import (
	"strings"
	"testing"
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
