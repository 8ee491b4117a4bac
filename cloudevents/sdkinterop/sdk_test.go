package sdkinterop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/cloudevents"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func suffix() string {
	id := strings.ReplaceAll(relay.NewID(), "-", "")
	return id[len(id)-12:]
}

// sdkEvent is an SDK event with every attribute: an Integer and a
// Boolean extension besides string ones, and binary data.
func sdkEvent(t *testing.T, tm time.Time) event.Event {
	t.Helper()
	ev := event.New() // specversion 1.0
	ev.SetID("sdk-" + suffix())
	ev.SetSource("/sdk/orders")
	ev.SetType("com.example.sdk.order")
	ev.SetSubject("A-1 ü 100% \"x\"")
	ev.SetTime(tm)
	ev.SetDataSchema("https://example.com/schemas/order.json")
	if err := ev.SetData("application/octet-stream", []byte{0, 1, 0xff, '\n', 'z'}); err != nil {
		t.Fatal(err)
	}
	ev.SetExtension("partitionkey", "customer-7")
	ev.SetExtension("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ev.SetExtension("priority", 5)
	ev.SetExtension("urgent", true)
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
	return ev
}

// relayEvent is a relay event with every attribute.
func relayEvent() *cloudevents.Event {
	return &cloudevents.Event{
		ID: "relay-" + suffix(), Source: "/relay/orders", SpecVersion: "1.0", Type: "com.example.relay.order",
		Subject: "B-2 ö 50% \"y\"", Time: time.Date(2026, 12, 1, 11, 0, 0, 987654321, time.UTC),
		DataContentType: "application/json", DataSchema: "https://example.com/schemas/b.json",
		Extensions: map[string]string{"partitionkey": "customer-9", "tenant": "acme", "count": "12"},
		Data:       []byte(`{"order":"B-2","lines":[1,2]}`),
	}
}

// sameAsSDK fails unless relay's event e has every attribute and the data
// of the SDK's ev; time is compared to precision.
func sameAsSDK(t *testing.T, e *cloudevents.Event, ev event.Event, precision time.Duration) {
	t.Helper()
	if e.ID != ev.ID() || e.Source != ev.Source() || e.SpecVersion != ev.SpecVersion() || e.Type != ev.Type() ||
		e.Subject != ev.Subject() || e.DataContentType != ev.DataContentType() || e.DataSchema != ev.DataSchema() {
		t.Errorf("attributes differ:\nrelay %+v\n  sdk %s", e, ev.Context)
	}
	if !e.Time.Truncate(precision).Equal(ev.Time().Truncate(precision)) {
		t.Errorf("time: relay %v, sdk %v", e.Time, ev.Time())
	}
	sdkExt := map[string]string{}
	for k, v := range ev.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			t.Fatal(err)
		}
		sdkExt[k] = s
	}
	if fmt.Sprint(sdkExt) != fmt.Sprint(e.Extensions) {
		t.Errorf("extensions: relay %v, sdk %v", e.Extensions, sdkExt)
	}
	if !bytes.Equal(e.Data, ev.Data()) {
		t.Errorf("data: relay %q, sdk %q", e.Data, ev.Data())
	}
}

// binaryWriter is a binding.BinaryWriter that records what the SDK's
// binary-mode encoding writes, as the SDK's own protocol writers do:
// every attribute but datacontenttype under prefix, datacontenttype on
// its own (Kafka's content-type header, AMQP's content-type property),
// the data as the body. With native, values keep the AMQP types the AMQP
// binding prefers (boolean, long, string, binary, timestamp); otherwise
// they are canonical strings (types.Format), as Kafka headers are.
type binaryWriter struct {
	prefix      string
	native      bool
	headers     map[string]any
	contentType string
	data        []byte
}

func (w *binaryWriter) Start(context.Context) error {
	w.headers = map[string]any{}
	return nil
}

func (w *binaryWriter) End(context.Context) error { return nil }

func (w *binaryWriter) SetData(r io.Reader) (err error) {
	w.data, err = io.ReadAll(r)
	return err
}

func (w *binaryWriter) SetAttribute(a spec.Attribute, v any) error {
	if a.Kind() == spec.DataContentType {
		s, err := types.Format(v)
		w.contentType = s
		return err
	}
	return w.set(a.Name(), v)
}

func (w *binaryWriter) SetExtension(name string, v any) error { return w.set(name, v) }

func (w *binaryWriter) set(name string, v any) error {
	if w.headers == nil {
		w.headers = map[string]any{}
	}
	if !w.native {
		s, err := types.Format(v)
		w.headers[w.prefix+name] = s
		return err
	}
	v, err := types.Validate(v)
	if err != nil {
		return err
	}
	switch x := v.(type) {
	case int32:
		v = int64(x) // AMQP long
	case types.URI:
		v = x.String()
	case types.URIRef:
		v = x.String()
	case types.Timestamp:
		v = x.Time
	}
	w.headers[w.prefix+name] = v
	return nil
}

// encodeWithSDK runs the SDK's binary-mode encoding of ev into a
// binaryWriter.
func encodeWithSDK(t *testing.T, ev event.Event, prefix string, native bool) *binaryWriter {
	t.Helper()
	w := &binaryWriter{prefix: prefix, native: native}
	enc, err := binding.Write(binding.WithForceBinary(context.Background()), binding.ToMessage(&ev), nil, w)
	if err != nil || enc != binding.EncodingBinary {
		t.Fatalf("binding.Write: %v, %v", enc, err)
	}
	return w
}

// binaryMessage is a binding.Message over a received message's
// attributes (headers or application properties whose names start with
// one of prefixes), its separate content type and its body, read with the
// SDK's spec rules (spec.WithPrefix), as the SDK's protocol readers do.
type binaryMessage struct {
	prefixes    []string
	headers     map[string]any
	contentType string
	data        []byte
}

func (m *binaryMessage) version() (string, spec.Version) {
	for _, p := range m.prefixes {
		if v, ok := m.headers[p+"specversion"]; ok {
			s, _ := types.Format(v)
			return p, spec.WithPrefix(p).Version(s)
		}
	}
	return "", nil
}

func (m *binaryMessage) ReadEncoding() binding.Encoding {
	if _, v := m.version(); v != nil {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m *binaryMessage) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m *binaryMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	prefix, sv := m.version()
	if sv == nil {
		return binding.ErrNotBinary
	}
	for k, v := range m.headers {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		var err error
		if a := sv.Attribute(k); a != nil {
			err = w.SetAttribute(a, v)
		} else {
			err = w.SetExtension(strings.ToLower(k[len(prefix):]), v)
		}
		if err != nil {
			return err
		}
	}
	if m.contentType != "" {
		if err := w.SetAttribute(sv.AttributeFromKind(spec.DataContentType), m.contentType); err != nil {
			return err
		}
	}
	if len(m.data) > 0 {
		return w.SetData(bytes.NewReader(m.data))
	}
	return nil
}

func (m *binaryMessage) Finish(error) error { return nil }

// GetAttribute and GetExtension make binaryMessage a
// binding.MessageMetadataReader, which binding.ToEvent requires.
func (m *binaryMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	prefix, sv := m.version()
	if sv == nil {
		return nil, nil
	}
	a := sv.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	if k == spec.DataContentType {
		if m.contentType == "" {
			return a, nil
		}
		return a, m.contentType
	}
	if v, ok := m.headers[prefix+a.Name()]; ok {
		return a, v
	}
	return a, nil
}

func (m *binaryMessage) GetExtension(name string) any {
	prefix, _ := m.version()
	return m.headers[prefix+name]
}

// decodeWithSDK turns m into an SDK event and validates it.
func decodeWithSDK(t *testing.T, m *binaryMessage) event.Event {
	t.Helper()
	if m.ReadEncoding() != binding.EncodingBinary {
		t.Fatalf("the SDK's rules find no binary-mode event in headers %v", m.headers)
	}
	ev, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		t.Fatalf("binding.ToEvent: %v", err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("the SDK finds the event invalid: %v", err)
	}
	return *ev
}

func TestBinaryMessageNeedsSpecVersion(t *testing.T) {
	m := &binaryMessage{prefixes: []string{"ce_"}, headers: map[string]any{"ce_id": "1"}}
	if m.ReadEncoding() != binding.EncodingUnknown {
		t.Fatal("a message without specversion read as binary")
	}
	if err := m.ReadBinary(context.Background(), nil); !errors.Is(err, binding.ErrNotBinary) {
		t.Fatalf("err = %v", err)
	}
}
