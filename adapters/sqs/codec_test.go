package sqs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"testing"

	"github.com/go-relay/relay"
)

// validAttrName is SQS's (and SNS's) rule for message attribute names.
func validAttrName(name string) bool {
	if len(name) == 0 || len(name) > 256 || !regexp.MustCompile(`^[A-Za-z0-9_.-]+$`).MatchString(name) {
		return false
	}
	if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return false
	}
	l := strings.ToLower(name)
	return !strings.HasPrefix(l, "aws.") && !strings.HasPrefix(l, "amazon.")
}

// wire checks what SQS would check of e and returns the delivery SQS
// would hand back.
func wire(t *testing.T, e encoded) received {
	t.Helper()
	if len(e.attrs) > MaxAttributes {
		t.Fatalf("%d attributes, SQS allows %d", len(e.attrs), MaxAttributes)
	}
	if !validText(e.body) {
		t.Fatalf("body %q is not valid SQS text", e.body)
	}
	size := len(e.body)
	for k, v := range e.attrs {
		if !validAttrName(k) {
			t.Fatalf("attribute name %q is not valid for SQS", k)
		}
		if !validText(v) {
			t.Fatalf("attribute %q value %q is not valid SQS text", k, v)
		}
		size += len(k) + len("String") + len(v)
	}
	if size != e.size {
		t.Fatalf("size %d, want %d", e.size, size)
	}
	return received{body: e.body, attrs: e.attrs, msgID: "sqs-id"}
}

func roundTrip(t *testing.T, m *relay.Message) *relay.Message {
	t.Helper()
	e := encode(m, false)
	if s := encode(m, true).size; s != e.size {
		t.Fatalf("size-only encoding says %d bytes, full encoding %d", s, e.size)
	}
	got := decode(wire(t, e))
	if got.ID != m.ID || got.Key != m.Key || !bytes.Equal(got.Payload, m.Payload) || !maps.Equal(got.Metadata, m.Metadata) {
		t.Fatalf("round trip changed the message:\n got %q %q %q %q\nwant %q %q %q %q",
			got.ID, got.Key, got.Payload, got.Metadata, m.ID, m.Key, m.Payload, m.Metadata)
	}
	return got
}

func TestCodecRoundTrip(t *testing.T) {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	many := relay.Metadata{}
	for i := range 40 {
		many[fmt.Sprintf("key-%02d", i)] = strings.Repeat("v", i)
	}
	cases := map[string]*relay.Message{
		"text":        {ID: relay.NewID(), Payload: []byte("hello")},
		"binary":      {ID: relay.NewID(), Key: "k", Payload: binary},
		"empty":       {ID: relay.NewID()},
		"unicode":     {ID: relay.NewID(), Key: "ключ-🔑", Payload: []byte("grüße 世界 🌍"), Metadata: relay.Metadata{"naïve-キー": "välue ✓"}},
		"many keys":   {ID: relay.NewID(), Payload: []byte("x"), Metadata: many},
		"odd values":  {ID: relay.NewID(), Payload: []byte("x"), Metadata: relay.Metadata{"empty": "", "spaces": "  a b  ", "nl": "a\nb", "ctl": "a\x01b", "ffff": "\uffff"}},
		"odd names":   {ID: relay.NewID(), Payload: []byte("x"), Metadata: relay.Metadata{"": "e", ".": "dot", "a..b": "1", "x.": "2", ".y": "3", "aws.trace": "4", "Amazon.z": "5", "_relay.id": "spoof", "under_score": "6"}},
		"long name":   {ID: relay.NewID(), Payload: []byte("x"), Metadata: relay.Metadata{strings.Repeat("n", 300): "v", "short": "v"}},
		"bad utf8":    {ID: "id\xff", Key: "key\xfe", Payload: []byte("\xff\xfe"), Metadata: relay.Metadata{"k\xff": "v\xfe", "ok": "\xc3"}},
		"xml chars":   {ID: relay.NewID(), Payload: []byte("a\x00b\x1fc\ufffe")},
		"json body":   {ID: relay.NewID(), Payload: []byte(`{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:x","Message":"inner"}`)},
		"exactly ten": {ID: relay.NewID(), Key: "k", Payload: []byte("x"), Metadata: relay.Metadata{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7", "h": "8"}},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) { roundTrip(t, m) })
	}
	// Eight metadata keys fit beside ID and Key: no packed attribute.
	if e := encode(cases["exactly ten"], false); len(e.attrs) != 10 || e.attrs[AttrPacked] != "" {
		t.Errorf("ten attributes expected natively, got %v", e.attrs)
	}
	// With 40 keys, 10 attributes are used, one of them the packed rest.
	if e := encode(cases["many keys"], false); len(e.attrs) != 10 || e.attrs[AttrPacked] == "" {
		t.Errorf("40 keys: %d attributes, packed %q", len(e.attrs), e.attrs[AttrPacked])
	}
	// A text payload is the body itself; a binary one is marked base64.
	if e := encode(cases["text"], false); e.body != "hello" || e.attrs[AttrEncoding] != "" {
		t.Errorf("text payload encoded as %q %v", e.body, e.attrs)
	}
	if e := encode(cases["binary"], false); e.attrs[AttrEncoding] != EncBase64 {
		t.Errorf("binary payload not marked base64: %v", e.attrs)
	}
}

func FuzzCodecRoundTrip(f *testing.F) {
	f.Add("id", "key", []byte("payload"), "k", "v", "k2", "v2")
	f.Add("\xff", "", []byte{0, 1}, ".", "", "aws.x", "\x00")
	f.Fuzz(func(t *testing.T, id, key string, payload []byte, k1, v1, k2, v2 string) {
		if id == "" {
			id = "x"
		}
		m := &relay.Message{ID: id, Key: key, Payload: payload, Metadata: relay.Metadata{k1: v1, k2: v2}}
		if len(payload) == 0 {
			m.Payload = nil
		}
		roundTrip(t, m)
	})
}

func TestAttrNameReversible(t *testing.T) {
	for _, k := range []string{"", "a", "_", "__", "_41", ".", "..", "a.b", "a..b", "a.", ".a", "aws.x", "AWS.x", "amazon.", "Amazon.Y", "x y", "ü", "a_2Eb"} {
		n := attrName(k)
		if !validAttrName(n) {
			t.Errorf("attrName(%q) = %q is not a valid SQS name", k, n)
		}
		if back := attrNameDecode(n); back != k {
			t.Errorf("attrNameDecode(attrName(%q)) = %q via %q", k, back, n)
		}
		if strings.HasPrefix(n, "_relay.") {
			t.Errorf("attrName(%q) = %q collides with relay's own attributes", k, n)
		}
	}
}

func TestDecodeForeignAndDamaged(t *testing.T) {
	// A message from another producer: body, attributes, SQS ID and group.
	m := decode(received{body: "plain", attrs: map[string]string{"trace_id": "t1"}, msgID: "sqs-1", groupID: "g"})
	if m.ID != "sqs-1" || m.Key != "g" || string(m.Payload) != "plain" || m.Metadata["trace_id"] != "t1" {
		t.Errorf("foreign message decoded as %+v", m)
	}
	// Damaged base64: delivered with the raw body and the problem.
	m = decode(received{body: "!!!", attrs: map[string]string{AttrID: "r1", AttrEncoding: EncBase64}, msgID: "sqs-2"})
	if m.ID != "r1" || string(m.Payload) != "!!!" || m.Metadata[MetaDecodeError] == "" {
		t.Errorf("damaged message decoded as %+v", m)
	}
	m = decode(received{body: "x", attrs: map[string]string{AttrID: "r2", AttrPacked: "{nope"}, msgID: "sqs-3"})
	if m.Metadata[MetaDecodeError] == "" {
		t.Errorf("broken packed metadata not reported: %+v", m)
	}
}

func TestUnwrapSNSEnvelope(t *testing.T) {
	inner := encode(&relay.Message{ID: "rid", Key: "k", Payload: []byte{0, 1, 2}, Metadata: relay.Metadata{"a": "1"}}, false)
	type attr struct{ Type, Value string }
	env := map[string]any{
		"Type": "Notification", "MessageId": "sns-1", "TopicArn": "arn:aws:sns:us-east-1:1:t",
		"Message": inner.body, "Timestamp": "2026-01-01T00:00:00Z", "SignatureVersion": "1",
		"MessageAttributes": map[string]attr{},
	}
	for k, v := range inner.attrs {
		env["MessageAttributes"].(map[string]attr)[k] = attr{"String", v}
	}
	body, _ := json.Marshal(env)
	r, ok := unwrapSNS(received{body: string(body), msgID: "sqs-1"})
	if !ok {
		t.Fatal("envelope not recognised")
	}
	m := decode(r)
	if m.ID != "rid" || m.Key != "k" || !bytes.Equal(m.Payload, []byte{0, 1, 2}) || m.Metadata["a"] != "1" {
		t.Errorf("relay message through a non-raw SNS subscription decoded as %+v", m)
	}
	// A foreign notification: its message, its attributes, the SNS ID.
	foreign := `{"Type":"Notification","MessageId":"sns-2","TopicArn":"arn:aws:sns:us-east-1:1:t","Message":"hi",
		"MessageAttributes":{"kind":{"Type":"String","Value":"a"},"bin":{"Type":"Binary","Value":"AAE="}}}`
	r, ok = unwrapSNS(received{body: foreign, msgID: "sqs-2"})
	m = decode(r)
	if !ok || m.ID != "sns-2" || string(m.Payload) != "hi" || m.Metadata["kind"] != "a" || m.Metadata["bin"] != "\x00\x01" {
		t.Errorf("foreign envelope decoded as %+v (ok %v)", m, ok)
	}
	// A relay message whose payload looks like an envelope stays as it is.
	e := encode(&relay.Message{ID: "r", Payload: []byte(foreign)}, false)
	if _, ok := unwrapSNS(received{body: e.body, attrs: e.attrs}); ok {
		t.Error("a relay payload that looks like an envelope was unwrapped")
	}
	for _, b := range []string{`{"Type":"Notification"}`, `[1]`, `{"Type":"Other","MessageId":"x","TopicArn":"arn:x","Message":"m"}`} {
		if _, ok := unwrapSNS(received{body: b}); ok {
			t.Errorf("%s taken for an envelope", b)
		}
	}
}

func TestPackChunks(t *testing.T) {
	var items []*outgoing
	for i := range 25 {
		m := &relay.Message{ID: fmt.Sprint(i), Key: fmt.Sprint("k", i%3), Payload: bytes.Repeat([]byte("a"), 100)}
		items = append(items, &outgoing{m: m, e: encode(m, false)})
	}
	chunks := pack(items, DefaultMaxBytes, false)
	if len(chunks) != 3 || len(chunks[0].items) != 10 || len(chunks[2].items) != 5 {
		t.Errorf("25 small messages packed into %d chunks", len(chunks))
	}
	// By bytes: each message ~100 KiB, so two fit in 256 KiB.
	var big []*outgoing
	for i := range 5 {
		m := &relay.Message{ID: fmt.Sprint(i), Key: "k", Payload: bytes.Repeat([]byte("b"), 100<<10)}
		big = append(big, &outgoing{m: m, e: encode(m, false)})
	}
	chunks = pack(big, DefaultMaxBytes, true)
	if len(chunks) != 3 {
		t.Errorf("5 × 100 KiB packed into %d chunks, want 3", len(chunks))
	}
	for i, c := range chunks {
		if c.bytes > DefaultMaxBytes {
			t.Errorf("chunk %d is %d bytes", i, c.bytes)
		}
		if i > 0 && (len(c.after) != 1 || c.after[0] != chunks[i-1]) {
			t.Errorf("FIFO chunk %d does not wait for chunk %d of the same group", i, i-1)
		}
	}
}

func TestFIFOIDs(t *testing.T) {
	if fifoID("order-42") != "order-42" {
		t.Error("a valid group ID was changed")
	}
	for _, s := range []string{"ключ", "has space", strings.Repeat("x", 129), "\x00"} {
		id := fifoID(s)
		if len(id) > 128 || strings.ContainsAny(id, " \x00") || id != fifoID(s) {
			t.Errorf("fifoID(%q) = %q", s, id)
		}
	}
}

func TestMergePolicy(t *testing.T) {
	const q, t1, t2 = "arn:aws:sqs:us-east-1:1:q", "arn:aws:sns:us-east-1:1:a", "arn:aws:sns:us-east-1:1:b"
	p1, changed, err := mergePolicy("", q, t1)
	if err != nil || !changed {
		t.Fatalf("empty policy: %v %v", changed, err)
	}
	p2, changed, err := mergePolicy(p1, q, t2)
	if err != nil || !changed {
		t.Fatalf("second topic: %v %v", changed, err)
	}
	if _, changed, _ := mergePolicy(p2, q, t1); changed {
		t.Error("merging a topic already allowed changed the policy")
	}
	var doc struct{ Statement []map[string]any }
	_ = json.Unmarshal([]byte(p2), &doc)
	if len(doc.Statement) != 2 {
		t.Errorf("policy of two topics has %d statements: %s", len(doc.Statement), p2)
	}
	// Someone else's statements are kept, object form included.
	other := `{"Version":"2012-10-17","Statement":{"Sid":"mine","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:root"},"Action":"sqs:*","Resource":"` + q + `"}}`
	p3, changed, err := mergePolicy(other, q, t1)
	if err != nil || !changed || !strings.Contains(p3, `"mine"`) || !strings.Contains(p3, policySid(t1)) {
		t.Errorf("merge into a foreign policy: %s %v %v", p3, changed, err)
	}
	// A hand-written grant for the topic counts as present.
	grant := `{"Statement":[{"Effect":"Allow","Principal":"*","Action":["sqs:SendMessage"],"Resource":"*","Condition":{"ArnLike":{"aws:SourceArn":"` + t1 + `"}}}]}`
	if _, changed, _ := mergePolicy(grant, q, t1); changed {
		t.Error("an existing grant was not recognised")
	}
	if _, _, err := mergePolicy("{not json", q, t1); err == nil {
		t.Error("a broken policy was overwritten instead of reported")
	}
}

func TestPartition(t *testing.T) {
	for region, want := range map[string]string{"us-east-1": "aws", "eu-west-3": "aws", "cn-north-1": "aws-cn", "us-gov-west-1": "aws-us-gov", "us-iso-east-1": "aws-iso"} {
		if got := partitionOf(region); got != want {
			t.Errorf("partitionOf(%s) = %s, want %s", region, got, want)
		}
	}
}
