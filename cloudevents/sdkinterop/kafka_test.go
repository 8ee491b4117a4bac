package sdkinterop

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/kafka"
	"github.com/go-relay/relay/cloudevents"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// kafkaSeeds is the real cluster of RELAY_TEST_KAFKA_BROKERS or a kfake
// cluster for this test.
func kafkaSeeds(t *testing.T) []string {
	t.Helper()
	if b := testenv.KafkaBrokers(t); b != nil {
		return b
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func kafkaURL(seeds []string, kv ...string) string {
	q := url.Values{}
	for _, s := range seeds[1:] {
		q.Add("seed", s)
	}
	q.Set("metadata_min_age", "50ms")
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return "kafka://" + seeds[0] + "?" + q.Encode()
}

func kafkaSubscribe(t *testing.T, seeds []string, topic string) <-chan *relay.Message {
	t.Helper()
	sub, err := relay.OpenSubscriber(context.Background(), kafkaURL(seeds, "group", "g-"+suffix(), "start", "earliest",
		"heartbeat_interval", "100ms", "session_timeout", "6s", "fetch_max_wait", "200ms"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	return ch
}

func rawKafka(t *testing.T, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestKafkaSDKToRelay: the SDK encodes an event in the Kafka binding's
// binary mode (ce_ headers, content-type, partitionkey as the record key);
// a plain franz-go producer sends it; relay's subscriber and FromMessage
// read every attribute and the data.
func TestKafkaSDKToRelay(t *testing.T) {
	seeds := kafkaSeeds(t)
	topic := "ce-sdk-" + suffix()
	ch := kafkaSubscribe(t, seeds, topic)

	ev := sdkEvent(t, time.Date(2026, 12, 1, 10, 30, 0, 123456789, time.UTC))
	w := encodeWithSDK(t, ev, "ce_", false)
	rec := &kgo.Record{Topic: topic, Key: []byte(ev.Extensions()["partitionkey"].(string)), Value: w.data}
	for k, v := range w.headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v.(string))})
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "content-type", Value: []byte(w.contentType)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rawKafka(t, seeds).ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}

	m := relaytest.Next(t, ch, "the SDK's event")
	e, err := cloudevents.FromMessage(m)
	if err != nil {
		t.Fatalf("FromMessage: %v (metadata %v)", err, m.Metadata)
	}
	sameAsSDK(t, e, ev, 0)
	if m.Key != "customer-7" {
		t.Errorf("message Key %q, want the record key", m.Key)
	}
	_ = m.Ack()
}

// TestKafkaRelayToSDK: relay publishes an event with cloudevents.Publisher;
// a plain franz-go consumer reads the record and the SDK, applying the
// Kafka binding's header rules, decodes every attribute and the data.
func TestKafkaRelayToSDK(t *testing.T) {
	seeds := kafkaSeeds(t)
	topic := "ce-relay-" + suffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, kafkaURL(seeds))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	e := relayEvent()
	if err := cloudevents.NewPublisher(pub).Publish(ctx, topic, e); err != nil {
		t.Fatal(err)
	}

	cl := rawKafka(t, seeds, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var rec *kgo.Record
	for rec == nil {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal("no record within 30s")
		}
		fs.EachRecord(func(r *kgo.Record) { rec = r })
	}
	if string(rec.Key) != "customer-9" {
		t.Errorf("record key %q, want the partitionkey", rec.Key)
	}
	msg := &binaryMessage{prefixes: []string{"ce_"}, headers: map[string]any{}, data: rec.Value}
	for _, h := range rec.Headers {
		if h.Key == "content-type" {
			msg.contentType = string(h.Value)
			continue
		}
		msg.headers[h.Key] = string(h.Value)
	}
	sameAsSDK(t, e, decodeWithSDK(t, msg), 0)
}

// TestKafkaSDKStructured: the SDK's JSON event format in a record whose
// content-type is application/cloudevents+json is read by relay.
func TestKafkaSDKStructured(t *testing.T) {
	seeds := kafkaSeeds(t)
	topic := "ce-sdk-st-" + suffix()
	ch := kafkaSubscribe(t, seeds, topic)

	ev := sdkEvent(t, time.Date(2026, 12, 1, 10, 30, 0, 5000, time.UTC))
	doc, err := ev.MarshalJSON() // binary data goes as data_base64
	if err != nil {
		t.Fatal(err)
	}
	jsonEv := event.New()
	jsonEv.SetID("sdk-json-" + suffix())
	jsonEv.SetSource("/sdk")
	jsonEv.SetType("t.json")
	if err := jsonEv.SetData(event.ApplicationJSON, map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	doc2, err := jsonEv.MarshalJSON() // JSON data goes as data
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ct := []kgo.RecordHeader{{Key: "content-type", Value: []byte(event.ApplicationCloudEventsJSON + "; charset=utf-8")}}
	if err := rawKafka(t, seeds).ProduceSync(ctx,
		&kgo.Record{Topic: topic, Value: doc, Headers: ct},
		&kgo.Record{Topic: topic, Value: doc2, Headers: ct}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := map[string]*cloudevents.Event{}
	for range 2 {
		m := relaytest.Next(t, ch, "structured event")
		e, err := cloudevents.FromMessage(m)
		if err != nil {
			t.Fatalf("FromMessage: %v", err)
		}
		got[e.ID] = e
		_ = m.Ack()
	}
	sameAsSDK(t, got[ev.ID()], ev, 0)
	sameAsSDK(t, got[jsonEv.ID()], jsonEv, 0)
}

// TestKafkaNoDataIsTombstone: the Kafka binding writes an event without
// data as a record without value. The SDK's encoding of such an event,
// sent as a NULL value, reads as an event with nil Data; relay's event
// with nil Data is a NULL value that the SDK decodes as an event without
// data.
func TestKafkaNoDataIsTombstone(t *testing.T) {
	seeds := kafkaSeeds(t)
	topic := "ce-nodata-" + suffix()
	ch := kafkaSubscribe(t, seeds, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ev := event.New()
	ev.SetID("sdk-nodata-" + suffix())
	ev.SetSource("/sdk")
	ev.SetType("t.deleted")
	ev.SetExtension("partitionkey", "customer-7")
	w := encodeWithSDK(t, ev, "ce_", false)
	if w.data != nil {
		t.Fatalf("the SDK wrote data %q for an event without data", w.data)
	}
	rec := &kgo.Record{Topic: topic, Key: []byte("customer-7")} // Value nil: NULL
	for k, v := range w.headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v.(string))})
	}
	if err := rawKafka(t, seeds).ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	m := relaytest.Next(t, ch, "the SDK's event without data")
	e, err := cloudevents.FromMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	if e.Data != nil || e.ID != ev.ID() {
		t.Errorf("got id %q data %q, want %q and nil data", e.ID, e.Data, ev.ID())
	}
	_ = m.Ack()

	pub, err := relay.OpenPublisher(ctx, kafkaURL(seeds))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	out := &cloudevents.Event{ID: "relay-nodata-" + suffix(), Source: "/relay", Type: "t.deleted",
		Extensions: map[string]string{"partitionkey": "customer-9"}}
	topic2 := topic + "-out"
	if err := cloudevents.NewPublisher(pub).Publish(ctx, topic2, out); err != nil {
		t.Fatal(err)
	}
	cl := rawKafka(t, seeds, kgo.ConsumeTopics(topic2), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got *kgo.Record
	for got == nil {
		if cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = r }); ctx.Err() != nil {
			t.Fatal("no record within 30s")
		}
	}
	if got.Value != nil {
		t.Fatalf("record value %q, want NULL (a tombstone)", got.Value)
	}
	msg := &binaryMessage{prefixes: []string{"ce_"}, headers: map[string]any{}}
	for _, h := range got.Headers {
		msg.headers[h.Key] = string(h.Value)
	}
	sdk := decodeWithSDK(t, msg)
	if sdk.ID() != out.ID || sdk.Data() != nil {
		t.Errorf("SDK read id %q data %q", sdk.ID(), sdk.Data())
	}
}

// TestKafkaRelayStructuredToSDK: relay's structured mode (PublishStructured)
// is the JSON event format the SDK parses: JSON data as "data", binary
// data as "data_base64", JSON data with whitespace around it as
// "data_base64" too (so that the SDK reads it byte for byte), every
// attribute as sent.
func TestKafkaRelayStructuredToSDK(t *testing.T) {
	seeds := kafkaSeeds(t)
	topic := "ce-relay-st-" + suffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, kafkaURL(seeds))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	jsonEv := relayEvent()
	binEv := relayEvent()
	binEv.DataContentType, binEv.Data = "application/octet-stream", []byte{0, 0xfe, 0xff, '"'}
	paddedEv := relayEvent()
	paddedEv.Data = []byte("  {\"order\": \"B-3\"}\n")
	if err := cloudevents.NewPublisher(pub).PublishStructured(ctx, topic, jsonEv, binEv, paddedEv); err != nil {
		t.Fatal(err)
	}
	cl := rawKafka(t, seeds, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]event.Event{}
	for len(got) < 3 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of 3 records within 30s", len(got))
		}
		fs.EachRecord(func(r *kgo.Record) {
			ct := ""
			for _, h := range r.Headers {
				if h.Key == "content-type" {
					ct = string(h.Value)
				}
			}
			if ct != cloudevents.StructuredContentType {
				t.Errorf("content-type header %q, want %q", ct, cloudevents.StructuredContentType)
			}
			var ev event.Event
			if err := ev.UnmarshalJSON(r.Value); err != nil {
				t.Fatalf("the SDK cannot parse %s: %v", r.Value, err)
			}
			if err := ev.Validate(); err != nil {
				t.Fatal(err)
			}
			got[ev.ID()] = ev
		})
	}
	sameAsSDK(t, jsonEv, got[jsonEv.ID], 0)
	sameAsSDK(t, binEv, got[binEv.ID], 0)
	sameAsSDK(t, paddedEv, got[paddedEv.ID], 0)
}
