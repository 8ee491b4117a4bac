package cloudevents_test

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/cloudevents"
)

// sample is an event with every attribute set, values that need escaping
// on NATS headers (space, '%', '"', non-ASCII) and binary data.
func sample() *cloudevents.Event {
	return &cloudevents.Event{
		ID:              "order-1001",
		Source:          "/shop/orders",
		SpecVersion:     "1.0",
		Type:            "com.example.order.placed",
		Subject:         `A-1001 "rush" 100% café`,
		Time:            time.Date(2026, 12, 1, 10, 30, 0, 123456789, time.UTC),
		DataContentType: "application/octet-stream; x=1",
		DataSchema:      "https://example.com/schemas/order.json",
		Extensions: map[string]string{
			"partitionkey": "customer-7",
			"traceparent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"priority":     "5",
			"emptyext":     "",
		},
		Data: []byte{0, 1, 2, 0xff, '\n', 'x'},
	}
}

func TestToMessageKafka(t *testing.T) {
	m, err := cloudevents.Kafka.ToMessage(sample())
	if err != nil {
		t.Fatal(err)
	}
	want := relay.Metadata{
		"ce_specversion":  "1.0",
		"ce_id":           "order-1001",
		"ce_source":       "/shop/orders",
		"ce_type":         "com.example.order.placed",
		"ce_subject":      `A-1001 "rush" 100% café`,
		"ce_time":         "2026-12-01T10:30:00.123456789Z",
		"content-type":    "application/octet-stream; x=1",
		"ce_dataschema":   "https://example.com/schemas/order.json",
		"ce_partitionkey": "customer-7",
		"ce_traceparent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"ce_priority":     "5",
		"ce_emptyext":     "",
	}
	if !maps.Equal(m.Metadata, want) {
		t.Errorf("metadata\n got %v\nwant %v", m.Metadata, want)
	}
	if m.ID != "order-1001" || m.Key != "customer-7" || string(m.Payload) != string(sample().Data) {
		t.Errorf("ID %q Key %q Payload %q", m.ID, m.Key, m.Payload)
	}
}

func TestToMessageAMQP(t *testing.T) {
	m, err := cloudevents.AMQP.ToMessage(sample())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Metadata["amqp-content-type"]; got != "application/octet-stream; x=1" {
		t.Errorf("amqp-content-type = %q", got)
	}
	for _, k := range []string{"cloudEvents_specversion", "cloudEvents_id", "cloudEvents_source", "cloudEvents_type",
		"cloudEvents_subject", "cloudEvents_time", "cloudEvents_dataschema", "cloudEvents_partitionkey", "cloudEvents_priority"} {
		if _, ok := m.Metadata[k]; !ok {
			t.Errorf("no %s in %v", k, m.Metadata)
		}
	}
	if _, ok := m.Metadata["cloudEvents_datacontenttype"]; ok {
		t.Error("datacontenttype written as an application property; the binding maps it to content-type")
	}
}

func TestToMessageNATSPercentEncodes(t *testing.T) {
	m, err := cloudevents.NATS.ToMessage(sample())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ce-subject":         "A-1001%20%22rush%22%20100%25%20caf%C3%A9",
		"ce-datacontenttype": "application/octet-stream;%20x=1",
		"ce-id":              "order-1001",
		"ce-partitionkey":    "customer-7",
	}
	for k, v := range want {
		if m.Metadata[k] != v {
			t.Errorf("%s = %q, want %q", k, m.Metadata[k], v)
		}
	}
}

func TestToMessageGenericLeavesIDAndKeyToMessage(t *testing.T) {
	m, err := cloudevents.Generic.ToMessage(sample())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ce-id", "ce-partitionkey"} {
		if _, ok := m.Metadata[k]; ok {
			t.Errorf("%s written; Generic carries it in the message ID/Key", k)
		}
	}
	if m.ID != "order-1001" || m.Key != "customer-7" {
		t.Errorf("ID %q Key %q", m.ID, m.Key)
	}
	// 7 core attributes and 3 extensions (partitionkey is the Key).
	if len(m.Metadata) != 10 {
		t.Errorf("%d metadata entries: %v", len(m.Metadata), m.Metadata)
	}
}

// TestRoundTripEveryBinding decodes what each binding encodes, through
// a copy of the message (as a broker delivers it), to the same event.
func TestRoundTripEveryBinding(t *testing.T) {
	for _, b := range []cloudevents.Binding{cloudevents.Kafka, cloudevents.AMQP, cloudevents.NATS, cloudevents.Generic} {
		t.Run(b.Name(), func(t *testing.T) {
			m, err := b.ToMessage(sample())
			if err != nil {
				t.Fatal(err)
			}
			got, err := cloudevents.FromMessage(m.Copy())
			if err != nil {
				t.Fatal(err)
			}
			assertEvent(t, got, sample())
		})
	}
}

func TestBindingFor(t *testing.T) {
	for backend, want := range map[string]string{"kafka": "kafka", "amqp": "amqp", "nats": "nats",
		"redis": "generic", "sqs": "generic", "sns": "generic", "postgres": "generic", "memory": "generic", "": "generic"} {
		if got := cloudevents.BindingFor(backend).Name(); got != want {
			t.Errorf("BindingFor(%q) = %s, want %s", backend, got, want)
		}
	}
}

func TestKafkaEventWithoutDataIsTombstone(t *testing.T) {
	e := sample()
	e.Data = nil
	m, err := cloudevents.Kafka.ToMessage(e)
	if err != nil {
		t.Fatal(err)
	}
	if m.Metadata["kafka.tombstone"] != "true" {
		t.Fatalf("no tombstone marker: %v", m.Metadata)
	}
	m.Payload = []byte{} // as the kafka adapter delivers a NULL value
	got, err := cloudevents.FromMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	if got.Data != nil {
		t.Errorf("Data = %q, want nil", got.Data)
	}
	e.Data = []byte{}
	if m, _ = cloudevents.Kafka.ToMessage(e); m.Metadata["kafka.tombstone"] != "" {
		t.Error("empty (non-nil) data made a tombstone")
	}
}

func TestFromMessageAMQPColonSeparator(t *testing.T) {
	m := &relay.Message{ID: "amqp-derived", Payload: []byte("hi"), Metadata: relay.Metadata{
		"cloudEvents:specversion": "1.0", "cloudEvents:id": "e1", "cloudEvents:source": "/s",
		"cloudEvents:type": "t", "cloudEvents:myext": "v", "amqp-content-type": "text/plain",
		"unrelated": "kept out",
	}}
	got, err := cloudevents.FromMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	assertEvent(t, got, &cloudevents.Event{ID: "e1", Source: "/s", SpecVersion: "1.0", Type: "t",
		DataContentType: "text/plain", Extensions: map[string]string{"myext": "v"}, Data: []byte("hi")})
}

// TestFromMessageNATSHeaderRules: header names in any case, quoted
// values, lower-case hex; overlong UTF-8 is rejected, as the binding says.
func TestFromMessageNATSHeaderRules(t *testing.T) {
	md := relay.Metadata{
		"Ce-Specversion": "1.0", "CE-ID": "e2", "ce-source": `"/a b"`, "ce-type": "t",
		"ce-subject": "Euro%20%e2%82%ac%20%F0%9F%98%80",
	}
	got, err := cloudevents.FromMessage(&relay.Message{ID: "nats:s:1", Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "e2" || got.Source != "/a b" || got.Subject != "Euro € 😀" {
		t.Errorf("got %+v", got)
	}
	md["Content-Type"] = "text/plain"
	if got, err := cloudevents.FromMessage(&relay.Message{Metadata: md}); err != nil || got.DataContentType != "text/plain" {
		t.Errorf("Content-Type without ce-datacontenttype: %v, %v", got, err)
	}
	md["ce-datacontenttype"] = "application/json"
	if got, err := cloudevents.FromMessage(&relay.Message{Metadata: md}); err != nil || got.DataContentType != "application/json" {
		t.Errorf("ce-datacontenttype must win over Content-Type: %v, %v", got, err)
	}
	md["ce-subject"] = "%C0%A0"
	if _, err := cloudevents.FromMessage(&relay.Message{Metadata: md}); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Errorf("overlong UTF-8: err = %v, want ErrInvalidEvent", err)
	}
	md["ce-subject"] = "100%"
	if _, err := cloudevents.FromMessage(&relay.Message{Metadata: md}); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Errorf("bare %%: err = %v, want ErrInvalidEvent", err)
	}
}

func TestFromMessageErrors(t *testing.T) {
	if _, err := cloudevents.FromMessage(&relay.Message{ID: "x", Metadata: relay.Metadata{"a": "b"}}); !errors.Is(err, cloudevents.ErrNotCloudEvent) {
		t.Errorf("plain message: %v", err)
	}
	missing := relay.Metadata{"ce_specversion": "1.0", "ce_id": "1", "ce_type": "t"}
	if _, err := cloudevents.FromMessage(&relay.Message{Metadata: missing}); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Errorf("no source: %v", err)
	}
	v03 := relay.Metadata{"ce_specversion": "0.3", "ce_id": "1", "ce_type": "t", "ce_source": "/s"}
	if _, err := cloudevents.FromMessage(&relay.Message{Metadata: v03}); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Errorf("specversion 0.3: %v", err)
	}
	two := relay.Metadata{"ce_specversion": "1.0", "ce-specversion": "1.0"}
	if _, err := cloudevents.FromMessage(&relay.Message{Metadata: two}); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Errorf("two prefixes: %v", err)
	}
	avro := relay.Metadata{"content-type": "application/cloudevents+avro"}
	if _, err := cloudevents.FromMessage(&relay.Message{Metadata: avro}); !errors.Is(err, cloudevents.ErrUnsupportedFormat) {
		t.Errorf("avro: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for name, mut := range map[string]func(*cloudevents.Event){
		"no id":          func(e *cloudevents.Event) { e.ID = "" },
		"no source":      func(e *cloudevents.Event) { e.Source = "" },
		"no type":        func(e *cloudevents.Event) { e.Type = "" },
		"specversion":    func(e *cloudevents.Event) { e.SpecVersion = "0.3" },
		"upper ext":      func(e *cloudevents.Event) { e.Extensions["Trace"] = "x" },
		"ext with dash":  func(e *cloudevents.Event) { e.Extensions["a-b"] = "x" },
		"core as ext":    func(e *cloudevents.Event) { e.Extensions["subject"] = "x" },
		"bad utf-8 attr": func(e *cloudevents.Event) { e.Subject = "\xff" },
	} {
		e := sample()
		mut(e)
		if _, err := cloudevents.Kafka.ToMessage(e); !errors.Is(err, cloudevents.ErrInvalidEvent) {
			t.Errorf("%s: err = %v, want ErrInvalidEvent", name, err)
		}
	}
	e := sample()
	e.SpecVersion = ""
	if m, err := cloudevents.Kafka.ToMessage(e); err != nil || m.Metadata["ce_specversion"] != "1.0" {
		t.Errorf("empty specversion: %v %v", err, m)
	}
}

func TestPublisherPicksBinding(t *testing.T) {
	rec := &recorder{backend: "kafka"}
	p := cloudevents.NewPublisher(rec)
	if p.Binding().Name() != "kafka" {
		t.Fatalf("binding %s", p.Binding().Name())
	}
	bad := sample()
	bad.Type = ""
	if err := p.Publish(t.Context(), "t", sample(), bad); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Fatalf("err = %v", err)
	}
	if rec.n != 0 {
		t.Fatalf("%d messages published although one event was invalid", rec.n)
	}
	if err := p.Publish(t.Context(), "t", sample(), sample()); err != nil || rec.n != 2 {
		t.Fatalf("err %v, %d published", err, rec.n)
	}
	if rec.last.Metadata["ce_id"] != "order-1001" {
		t.Errorf("not Kafka-encoded: %v", rec.last.Metadata)
	}
	if cloudevents.NewPublisher(&plainPub{}).Binding().Name() != "generic" {
		t.Error("publisher without capabilities: not Generic")
	}
}

type plainPub struct{}

func (*plainPub) Publish(context.Context, string, ...*relay.Message) error { return nil }
func (*plainPub) Close() error                                             { return nil }

type recorder struct {
	plainPub
	backend string
	n       int
	last    *relay.Message
}

func (r *recorder) Publish(_ context.Context, _ string, msgs ...*relay.Message) error {
	r.n += len(msgs)
	r.last = msgs[len(msgs)-1]
	return nil
}

func (r *recorder) Capabilities() relay.Capabilities { return relay.Capabilities{Backend: r.backend} }

// assertEvent compares every attribute and the data byte for byte.
func assertEvent(t *testing.T, got, want *cloudevents.Event) {
	t.Helper()
	if got.ID != want.ID || got.Source != want.Source || got.SpecVersion != want.SpecVersion ||
		got.Type != want.Type || got.Subject != want.Subject || got.DataContentType != want.DataContentType ||
		got.DataSchema != want.DataSchema {
		t.Errorf("attributes\n got %+v\nwant %+v", got, want)
	}
	if !got.Time.Equal(want.Time) {
		t.Errorf("time %v, want %v", got.Time, want.Time)
	}
	if !reflect.DeepEqual(normExt(got.Extensions), normExt(want.Extensions)) {
		t.Errorf("extensions\n got %v\nwant %v", got.Extensions, want.Extensions)
	}
	if string(got.Data) != string(want.Data) {
		t.Errorf("data %q, want %q", got.Data, want.Data)
	}
}

func normExt(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// A nil event is an invalid event, not a panic, wherever it is given.
func TestNilEvent(t *testing.T) {
	if _, err := cloudevents.Kafka.ToMessage(nil); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Errorf("ToMessage(nil) = %v, want ErrInvalidEvent", err)
	}
	if _, err := cloudevents.EncodeJSON(nil); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Errorf("EncodeJSON(nil) = %v, want ErrInvalidEvent", err)
	}
	var e *cloudevents.Event
	if err := e.Validate(); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Errorf("Validate on nil = %v, want ErrInvalidEvent", err)
	}
}
