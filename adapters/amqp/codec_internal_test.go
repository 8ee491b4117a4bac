package amqp

import (
	"math"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
)

func TestStringify(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		in   any
		want string
	}{
		{nil, ""},
		{"s", "s"},
		{[]byte("b"), "b"},
		{true, "true"},
		{int8(-8), "-8"},
		{int16(16), "16"},
		{int32(-32), "-32"},
		{int64(1) << 40, "1099511627776"},
		{uint8(8), "8"},
		{uint16(16), "16"},
		{uint32(32), "32"},
		{float32(1.5), "1.5"},
		{0.25, "0.25"},
		{ts, "2026-01-02T02:04:05Z"},
		{amqp091.Decimal{Scale: 2, Value: 12345}, "123.45"},
		{amqp091.Decimal{Scale: 3, Value: -5}, "-0.005"},
		{amqp091.Decimal{Scale: 0, Value: 7}, "7"},
		{[]any{int32(1), "a", amqp091.Table{"z": true, "a": ts}}, `[1,"a",{"a":"2026-01-02T02:04:05Z","z":true}]`},
		{amqp091.Table{"b": []byte{0xff}, "d": amqp091.Decimal{Scale: 1, Value: 15}}, `{"b":"/w==","d":"1.5"}`},
	} {
		if got := stringify(tc.in); got != tc.want {
			t.Errorf("stringify(%#v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDelayBuckets(t *testing.T) {
	for _, tc := range []struct {
		d time.Duration
		k int
	}{
		{time.Nanosecond, 0}, {time.Millisecond, 0}, {2 * time.Millisecond, 1}, {3 * time.Millisecond, 2},
		{1500 * time.Millisecond, 11}, {2048 * time.Millisecond, 11}, {2049 * time.Millisecond, 12}, {MaxDelay, maxDelayExp},
	} {
		k := delayBucket(tc.d)
		if k != tc.k {
			t.Errorf("delayBucket(%v) = %d, want %d", tc.d, k, tc.k)
		}
		if time.Duration(1<<k)*time.Millisecond < tc.d {
			t.Errorf("bucket %d shorter than %v", k, tc.d)
		}
	}
	is := isDelayQueueOf("t.g")
	if !is(delayQueue("t.g", 11)) || is("t.g") || is("t.g.relay-delay-xms") || is("t.g2.relay-delay-2048ms") {
		t.Errorf("isDelayQueueOf misclassifies")
	}
	if n := len(delayQueue("t.g", maxDelayExp)) - len("t.g"); n != maxDelaySuffix {
		t.Errorf("maxDelaySuffix %d, longest suffix %d", maxDelaySuffix, n)
	}
	// Due queues are named after the exchange, with their own infix, so
	// that topic "t.g"'s due queues are not group g of topic t's delay
	// queues.
	if got := dueQueue("t", 1024); got != "t.relay-due-1024ms" {
		t.Errorf("dueQueue = %q", got)
	}
	rq := isRelayQueue("t.g", "t")
	if !rq(dueQueue("t", 8)) || !rq(delayQueue("t.g", 3)) || rq(dueQueue("t.g", 8)) || rq("t.g") || rq(dueExchange("t")) {
		t.Errorf("isRelayQueue misclassifies")
	}
	if dueQueue("t.g", 8) == delayQueue("t", 3) || dueQueue("t.g", 8) == delayQueue("t.g", 3) {
		t.Errorf("due and delay queue names collide")
	}
	if n := len(dueQueue("t", dueBucket(MaxDelay))) - len("t"); n != maxDueSuffix {
		t.Errorf("maxDueSuffix %d, longest suffix %d", maxDueSuffix, n)
	}
}

// TestDueBuckets: a due bucket is never shorter than the delay and less
// than 2^(1/4) times it (so head-of-line waits in one due queue stay under
// 19% of a delay); delays 1.2s and 2s, or 500ms and 600ms, get queues of
// their own.
func TestDueBuckets(t *testing.T) {
	step := math.Exp2(1.0 / dueStepsPerDoubling)
	for ms := int64(1); ms <= 1<<maxDelayExp; ms = ms*3/2 + 1 {
		d := time.Duration(ms) * time.Millisecond
		b := dueBucket(d)
		if time.Duration(b)*time.Millisecond < d {
			t.Fatalf("dueBucket(%v) = %dms, shorter", d, b)
		}
		if ms > 8 && float64(b) >= step*float64(ms)+1 {
			t.Fatalf("dueBucket(%v) = %dms, %.3f times the delay", d, b, float64(b)/float64(ms))
		}
	}
	if dueBucket(MaxDelay) != 1<<maxDelayExp || dueBucket(0) != 1 {
		t.Errorf("dueBucket bounds: %d, %d", dueBucket(MaxDelay), dueBucket(0))
	}
	for _, p := range [][2]time.Duration{{1200 * time.Millisecond, 2 * time.Second}, {500 * time.Millisecond, 600 * time.Millisecond}} {
		if dueBucket(p[0]) == dueBucket(p[1]) {
			t.Errorf("%v and %v share due bucket %d", p[0], p[1], dueBucket(p[0]))
		}
	}
}

// TestDecodeHidesDue: a message that came through a due queue is
// delivered without the relay-due header, the expiration and the
// dead-lettering traces of the due queue, but with foreign ones.
func TestDecodeHidesDue(t *testing.T) {
	d := &amqp091.Delivery{
		MessageId: "m1", RoutingKey: "k", Body: []byte("x"),
		Headers: amqp091.Table{
			headerDue:              bucketLabel(1024),
			"app":                  "v",
			"x-first-death-queue":  dueQueue("t", 1024),
			"x-first-death-reason": "expired",
			"x-death": []any{
				amqp091.Table{"queue": dueQueue("t", 1024), "reason": "expired", "count": int64(1)},
			},
		},
	}
	dec := decode(d, isRelayQueue("t.g", "t"))
	if len(dec.msg.Metadata) != 1 || dec.msg.Metadata["app"] != "v" || dec.msg.Key != "k" {
		t.Errorf("decoded metadata %v key %q, want only app=v and key k", dec.msg.Metadata, dec.msg.Key)
	}
	if err := validateMessage(&relay.Message{ID: "x", Metadata: relay.Metadata{headerDue: "1ms"}}); err == nil {
		t.Error("metadata named relay-due accepted")
	}
}

func TestDecodeForeignAndHidden(t *testing.T) {
	q := "t.g"
	is := isDelayQueueOf(q)
	d := &amqp091.Delivery{
		Exchange:   "t",
		RoutingKey: "rk",
		Headers: amqp091.Table{
			"n":                    int32(7),
			"x-delivery-count":     int64(2),
			"x-relay-attempt":      "3",
			"x-relay-key":          "orig",
			"x-first-death-queue":  delayQueue(q, 3),
			"x-first-death-reason": "expired",
			"x-death": []any{
				amqp091.Table{"queue": delayQueue(q, 3), "reason": "expired", "count": int64(1)},
				amqp091.Table{"queue": "elsewhere", "reason": "rejected", "count": int64(1)},
			},
		},
		ContentType: "text/plain",
		Timestamp:   time.Unix(1700000000, 0),
		Body:        []byte("x"),
	}
	dec := decode(d, is)
	m := dec.msg
	if dec.base != 3 || dec.count != 2 || m.Key != "orig" {
		t.Errorf("base %d count %d key %q", dec.base, dec.count, m.Key)
	}
	want := relay.Metadata{
		"n":             "7",
		"x-death":       `[{"count":1,"queue":"elsewhere","reason":"rejected"}]`,
		MetaContentType: "text/plain",
		MetaTimestamp:   "2023-11-14T22:13:20Z",
	}
	if len(m.Metadata) != len(want) {
		t.Errorf("metadata %q, want %q", m.Metadata, want)
	}
	for k, v := range want {
		if m.Metadata[k] != v {
			t.Errorf("metadata[%q] = %q, want %q", k, m.Metadata[k], v)
		}
	}
	if m.ID == "" || m.ID != decode(d, is).msg.ID {
		t.Errorf("derived ID %q is not stable", m.ID)
	}
	// A redelivery with broker-added headers keeps the derived ID.
	d2 := *d
	d2.Headers = amqp091.Table{}
	for k, v := range d.Headers {
		d2.Headers[k] = v
	}
	d2.Headers["x-delivery-count"] = int64(5)
	if decode(&d2, is).msg.ID != m.ID {
		t.Errorf("derived ID changed with x-delivery-count")
	}
	d2.Body = []byte("y")
	if decode(&d2, is).msg.ID == m.ID {
		t.Errorf("derived ID ignores the body")
	}
	if !strings.HasPrefix(m.ID[14:], "8") {
		t.Errorf("derived ID %s is not a version-8 UUID", m.ID)
	}

	clean := cleanHeaders(d.Headers, is)
	if _, ok := clean["x-relay-key"]; ok {
		t.Errorf("cleanHeaders kept relay headers: %v", clean)
	}
	if _, ok := clean["x-delivery-count"]; ok {
		t.Errorf("cleanHeaders kept x-delivery-count")
	}
	if _, ok := clean["x-first-death-queue"]; ok {
		t.Errorf("cleanHeaders kept the delay queue's x-first-death-queue")
	}
	if deaths := clean["x-death"].([]any); len(deaths) != 1 {
		t.Errorf("cleanHeaders x-death %v", deaths)
	}
}

func TestEncodeProperties(t *testing.T) {
	m := &relay.Message{ID: "id", Key: "k", Payload: []byte("p"), Metadata: relay.Metadata{
		MetaContentType: "application/json", MetaCorrelationID: "c", MetaReplyTo: "r", MetaType: "ty",
		MetaAppID: "app", MetaContentEncoding: "gzip", "plain": "v",
	}}
	p := encode(m)
	if p.ContentType != "application/json" || p.CorrelationId != "c" || p.ReplyTo != "r" || p.Type != "ty" ||
		p.AppId != "app" || p.ContentEncoding != "gzip" || p.MessageId != "id" || p.DeliveryMode != amqp091.Persistent {
		t.Errorf("properties %+v", p)
	}
	if len(p.Headers) != 1 || p.Headers["plain"] != "v" {
		t.Errorf("headers %v", p.Headers)
	}
	d := &amqp091.Delivery{MessageId: p.MessageId, RoutingKey: "k", Headers: p.Headers, ContentType: p.ContentType,
		ContentEncoding: p.ContentEncoding, CorrelationId: p.CorrelationId, ReplyTo: p.ReplyTo, Type: p.Type, AppId: p.AppId, Body: p.Body}
	got := decode(d, nil).msg
	if len(got.Metadata) != len(m.Metadata) {
		t.Fatalf("round trip %q, want %q", got.Metadata, m.Metadata)
	}
	for k, v := range m.Metadata {
		if got.Metadata[k] != v {
			t.Errorf("round trip [%q] = %q, want %q", k, got.Metadata[k], v)
		}
	}
	if err := validateMessage(&relay.Message{ID: "x", Metadata: relay.Metadata{"x-relay-key": "v"}}); err == nil {
		t.Errorf("reserved header prefix accepted")
	}
	if err := validateMessage(&relay.Message{ID: "x", Key: strings.Repeat("k", 256)}); err == nil {
		t.Errorf("256-byte key accepted")
	}
}

func TestHeaderSizesAgree(t *testing.T) {
	m := &relay.Message{ID: relay.NewID(), Metadata: relay.Metadata{
		"a": "1", "longer-key": strings.Repeat("x", 300), MetaContentType: "text/plain", MetaAppID: "app",
	}}
	p := encode(m)
	if got, want := publishingHeaderSize(&p), messageHeaderSize(m); got != want {
		t.Errorf("publishingHeaderSize %d, messageHeaderSize %d", got, want)
	}
	nested := amqp091.Table{"t": amqp091.Table{"n": int32(1)}, "l": []any{"ab", int64(2)}, "d": amqp091.Decimal{}}
	// t: 1+1+1 + (4 + 1+1+1+4); l: 1+1+1 + (4 + 1+4+2 + 1+8); d: 1+1+1+5
	if got, want := tableSize(nested), (3+11)+(3+20)+(3+5); got != want {
		t.Errorf("tableSize %d, want %d", got, want)
	}
}

// A delivery whose body the client left nil reads as a present, empty
// payload (project rule: nil and empty are not distinguished, reads give
// empty).
func TestDecodeNilBodyIsEmpty(t *testing.T) {
	for _, body := range [][]byte{nil, {}} {
		got := decode(&amqp091.Delivery{MessageId: "m", Body: body}, nil).msg
		if got.Payload == nil || len(got.Payload) != 0 {
			t.Errorf("body %#v decoded to payload %#v, want non-nil empty", body, got.Payload)
		}
	}
	for _, p := range [][]byte{nil, {}} {
		if b := encode(&relay.Message{ID: "m", Payload: p}).Body; len(b) != 0 {
			t.Errorf("payload %#v encoded to body %q", p, b)
		}
	}
}
