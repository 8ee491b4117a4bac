package sqs

import (
	"strings"
	"testing"
)

// FuzzDecode feeds decode deliveries as a non-relay producer (or a damaged
// relay one) could send them: arbitrary body and message attributes,
// including relay's own _relay.* attributes with broken base64 and packed
// JSON. decode must not panic and must deliver a message with an ID
// whenever the broker gave one.
func FuzzDecode(f *testing.F) {
	f.Add("hello", "plain=v\nother=w", "mid-1", "")
	f.Add("aGk=", AttrID+"=id1\n"+AttrEncoding+"="+EncBase64+"\n"+AttrKey+"=k", "mid-2", "g")
	f.Add("%%%", AttrID+"=id2\n"+AttrEncoding+"="+EncBase64, "mid-3", "")
	f.Add("", AttrPacked+`={"id":"x","md":{"a":"b"}}`+"\n"+AttrEncoding+"="+EncEmpty, "mid-4", "")
	f.Add("x", AttrPacked+`={not json`+"\n"+AttrEncoding+"=weird", "mid-5", "")
	f.Fuzz(func(t *testing.T, body, attrs, msgID, groupID string) {
		r := received{body: body, msgID: msgID, groupID: groupID}
		if attrs != "" {
			r.attrs = map[string]string{}
			for _, line := range strings.Split(attrs, "\n") {
				k, v, _ := strings.Cut(line, "=")
				r.attrs[k] = v
			}
		}
		m := decode(r)
		if m == nil {
			t.Fatal("decode returned nil")
		}
		if m.ID == "" && msgID != "" {
			t.Fatalf("no ID although the broker gave %q (attrs %q)", msgID, attrs)
		}
	})
}
