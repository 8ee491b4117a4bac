package cloudevents_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/cloudevents"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

const structuredDoc = `{
	"specversion": "1.0", "id": "s-1", "source": "/structured", "type": "t.s",
	"subject": "sub", "time": "2026-12-01T10:30:00.5+01:00",
	"datacontenttype": "application/json", "dataschema": "https://example.com/s.json",
	"partitionkey": "pk", "count": 42, "flag": true, "nothing": null,
	"data": {"b": [1, 2.50, "x"],  "a": null}
}`

func structuredWant() *cloudevents.Event {
	return &cloudevents.Event{ID: "s-1", Source: "/structured", SpecVersion: "1.0", Type: "t.s", Subject: "sub",
		Time:            time.Date(2026, 12, 1, 9, 30, 0, 500000000, time.UTC),
		DataContentType: "application/json", DataSchema: "https://example.com/s.json",
		Extensions: map[string]string{"partitionkey": "pk", "count": "42", "flag": "true"},
		// the data member's JSON text as it is in the document
		Data: []byte(`{"b": [1, 2.50, "x"],  "a": null}`)}
}

func TestDecodeJSON(t *testing.T) {
	got, err := cloudevents.DecodeJSON([]byte(structuredDoc))
	if err != nil {
		t.Fatal(err)
	}
	assertEvent(t, got, structuredWant())

	b64, err := cloudevents.DecodeJSON([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":"AAH/"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(b64.Data) != "\x00\x01\xff" {
		t.Errorf("data_base64: %q", b64.Data)
	}
	text, err := cloudevents.DecodeJSON([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":"a \"b\""}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(text.Data) != `a "b"` {
		t.Errorf("text data: %q", text.Data)
	}
	jsonString, err := cloudevents.DecodeJSON([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","data":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(jsonString.Data) != `"x"` {
		t.Errorf("JSON string data: %q, want the JSON text", jsonString.Data)
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	for name, doc := range map[string]string{
		"not json":       `nope`,
		"array":          `[1]`,
		"trailing":       `{"specversion":"1.0","id":"1","source":"/s","type":"t"} {}`,
		"both data":      `{"specversion":"1.0","id":"1","source":"/s","type":"t","data":1,"data_base64":"AA=="}`,
		"bad base64":     `{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":"!"}`,
		"object ext":     `{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":{}}`,
		"bad ext name":   `{"specversion":"1.0","id":"1","source":"/s","type":"t","Ext":"x"}`,
		"no source":      `{"specversion":"1.0","id":"1","type":"t"}`,
		"id not string":  `{"specversion":"1.0","id":1,"source":"/s","type":"t"}`,
		"bad time":       `{"specversion":"1.0","id":"1","source":"/s","type":"t","time":"yesterday"}`,
		"no specversion": `{"id":"1","source":"/s","type":"t"}`,
	} {
		if _, err := cloudevents.DecodeJSON([]byte(doc)); !errors.Is(err, cloudevents.ErrInvalidEvent) {
			t.Errorf("%s: err = %v, want ErrInvalidEvent", name, err)
		}
	}
}

// TestFromMessageDetectsStructured: the content type decides, whichever
// key carries it, in any case and with parameters; binary attributes
// present as well (the bindings allow them) do not matter.
func TestFromMessageDetectsStructured(t *testing.T) {
	for _, key := range []string{"content-type", "Content-Type", "amqp-content-type"} {
		m := &relay.Message{ID: "x", Payload: []byte(structuredDoc), Metadata: relay.Metadata{
			key: "Application/CloudEvents+JSON; charset=UTF-8", "ce_id": "ignored"}}
		got, err := cloudevents.FromMessage(m)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		assertEvent(t, got, structuredWant())
	}
}

// TestStructuredEveryBackend: a structured-mode message from a foreign
// producer (the content type on the backend's content-type header or
// property, the event as JSON in the payload) is read on every backend.
func TestStructuredEveryBackend(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			pub, ch, topic := open(t, b, "ce-st-")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ctKey := "content-type"
			if b.name == "amqp" {
				ctKey = "amqp-content-type" // the AMQP content-type property
			}
			m := relay.NewMessage([]byte(structuredDoc))
			m.Metadata = relay.Metadata{ctKey: "application/cloudevents+json; charset=UTF-8"}
			if err := pub.Publish(ctx, topic, m); err != nil {
				t.Fatal(err)
			}
			got := relaytest.Next(t, ch, "structured event")
			e, err := cloudevents.FromMessage(got)
			if err != nil {
				t.Fatal(err)
			}
			assertEvent(t, e, structuredWant())
			_ = got.Ack()
		})
	}
}

func TestEncodeJSON(t *testing.T) {
	e := sample() // binary data: data_base64
	doc, err := cloudevents.EncodeJSON(e)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), `"data_base64":"AAEC/wp4"`) {
		t.Errorf("binary data not as data_base64: %s", doc)
	}
	got, err := cloudevents.DecodeJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	assertEvent(t, got, e)

	js := structuredWant() // JSON data with odd whitespace: verbatim
	doc, err = cloudevents.EncodeJSON(js)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), `"data":{"b": [1, 2.50, "x"],  "a": null}`) {
		t.Errorf("JSON data not verbatim: %s", doc)
	}
	if got, err = cloudevents.DecodeJSON(doc); err != nil {
		t.Fatal(err)
	}
	assertEvent(t, got, js)

	js.Data = []byte("not json") // JSON content type, invalid JSON: base64
	if doc, _ = cloudevents.EncodeJSON(js); !strings.Contains(string(doc), "data_base64") {
		t.Errorf("invalid JSON data written as data: %s", doc)
	}
	js.Data = nil
	if doc, _ = cloudevents.EncodeJSON(js); strings.Contains(string(doc), `"data"`) || strings.Contains(string(doc), `"data_base64"`) {
		t.Errorf("nil data written: %s", doc)
	}
	js.Type = ""
	if _, err := cloudevents.EncodeJSON(js); !errors.Is(err, cloudevents.ErrInvalidEvent) {
		t.Errorf("invalid event: %v", err)
	}
}

// TestPublishStructuredEveryBackend: events published in structured mode
// come back with every attribute and the data, on every backend, and the
// content type is where the backend's binding puts it.
func TestPublishStructuredEveryBackend(t *testing.T) {
	wantKey := map[string]string{"amqp": "amqp-content-type", "nats": "Content-Type"}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			pub, ch, topic := open(t, b, "ce-pst-")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sent := events()
			if err := cloudevents.NewPublisher(pub).PublishStructured(ctx, topic, sent...); err != nil {
				t.Fatal(err)
			}
			want := map[string]*cloudevents.Event{}
			for _, e := range sent {
				want[e.ID] = e
			}
			key := wantKey[b.name]
			if key == "" {
				key = "content-type"
			}
			for range sent {
				m := relaytest.Next(t, ch, "structured event")
				if m.Metadata[key] != cloudevents.StructuredContentType {
					t.Errorf("metadata %v: no %s", m.Metadata, key)
				}
				e, err := cloudevents.FromMessage(m)
				if err != nil {
					t.Fatal(err)
				}
				w := want[e.ID]
				if w == nil {
					t.Fatalf("unexpected event %q", e.ID)
				}
				if w.Data == nil {
					w.Data = []byte{} // nil data is absent in JSON; compared as empty
				}
				assertEvent(t, e, w)
				if m.ID != w.ID || m.Key != w.Extensions["partitionkey"] {
					t.Errorf("message ID %q Key %q", m.ID, m.Key)
				}
				_ = m.Ack()
			}
		})
	}
}

// JSON data is given back byte for byte: whitespace before and after the
// value (which a JSON reader drops with the space between members) and
// invalid UTF-8 make EncodeJSON write data_base64 instead of data; data
// without them is still written verbatim. Through a broker too.
func TestStructuredDataByteExact(t *testing.T) {
	for _, data := range []string{
		"  {\"a\": 1}\n",      // leading whitespace, trailing newline
		"{\"a\": 1}\n",        // a file's trailing newline
		"\t[1, 2]",            // leading tab
		"\"caf\xe9\"",         // a JSON string that is not UTF-8
		"{\"a\":  [1, 2.50]}", // inner whitespace: verbatim as data
		"42",
	} {
		e := &cloudevents.Event{ID: "e-1", Source: "/s", Type: "t", DataContentType: "application/json", Data: []byte(data)}
		doc, err := cloudevents.EncodeJSON(e)
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		got, err := cloudevents.DecodeJSON(doc)
		if err != nil {
			t.Fatalf("%q: %v (document %s)", data, err, doc)
		}
		if string(got.Data) != data {
			t.Errorf("data %q came back as %q (document %s)", data, got.Data, doc)
		}
		m, err := cloudevents.Kafka.ToStructuredMessage(e)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := cloudevents.FromMessage(m); err != nil || string(back.Data) != data {
			t.Errorf("data %q through a structured message: %q, %v", data, back.Data, err)
		}
	}
	doc, _ := cloudevents.EncodeJSON(&cloudevents.Event{ID: "e-2", Source: "/s", Type: "t", Data: []byte(`{"a":1}`)})
	if !strings.Contains(string(doc), `"data":{"a":1}`) {
		t.Errorf("trimmed JSON data not written verbatim: %s", doc)
	}
}
