package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// rawRecords reads n records of topic from the start with a plain kgo
// client, in partition-0 order (the tests use one partition).
func rawRecords(t *testing.T, c *cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, name string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value), true
		}
	}
	return "", false
}

// TestEmptyPayloadAndTombstone: nil and empty payloads are produced as
// present 0-byte values, not NULL; kafka.tombstone=true produces a NULL
// value without a kafka.tombstone header; a received NULL value is an
// empty payload with kafka.tombstone=true, and publishing that message
// again (what a bridge does) writes a tombstone again.
func TestEmptyPayloadAndTombstone(t *testing.T) {
	c := newCluster(t)
	topic, copyTopic := unique("empty"), unique("empty-copy")
	c.createTopic(t, topic, 1)
	c.createTopic(t, copyTopic, 1)
	pub := relaytest.OpenPublisher(t, c.url())
	msgs := []*relay.Message{
		{ID: "nil", Payload: nil},
		{ID: "empty", Payload: []byte{}},
		{ID: "tomb", Key: "k", Metadata: relay.Metadata{"kafka.tombstone": "true", "a": "b"}},
		{ID: "not-tomb", Metadata: relay.Metadata{"kafka.tombstone": "false"}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pub.Publish(ctx, topic, msgs...); err != nil {
		t.Fatal(err)
	}

	recs := rawRecords(t, c, topic, len(msgs))
	for i, r := range recs {
		id, _ := header(r, "relay-id")
		if id != msgs[i].ID {
			t.Fatalf("record %d: relay-id %q, want %q", i, id, msgs[i].ID)
		}
		if _, ok := header(r, "kafka.tombstone"); ok {
			t.Errorf("%s: the %s entry was sent as a header", id, "kafka.tombstone")
		}
		if id == "tomb" {
			if r.Value != nil {
				t.Errorf("tomb: value %q, want NULL", r.Value)
			}
			if v, _ := header(r, "a"); v != "b" {
				t.Errorf("tomb: header a = %q", v)
			}
			continue
		}
		if r.Value == nil || len(r.Value) != 0 {
			t.Errorf("%s: value %#v, want a present 0-byte value", id, r.Value)
		}
	}

	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g")))
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var tomb *relay.Message
	for range msgs {
		m := recv(t, ch)
		if len(m.Payload) != 0 {
			t.Fatalf("%s: payload %q", m.ID, m.Payload)
		}
		if m.ID == "tomb" {
			tomb = m
			if m.Metadata["kafka.tombstone"] != "true" || m.Metadata["a"] != "b" || len(m.Metadata) != 2 || m.Key != "k" {
				t.Fatalf("tombstone delivered with key %q metadata %v", m.Key, m.Metadata)
			}
		} else if len(m.Metadata) != 0 {
			t.Fatalf("%s: metadata %v, want none", m.ID, m.Metadata)
		}
		_ = m.Ack()
	}
	// A bridge re-producing the tombstone keeps it a tombstone.
	if err := pub.Publish(ctx, copyTopic, tomb); err != nil {
		t.Fatal(err)
	}
	r := rawRecords(t, c, copyTopic, 1)[0]
	if r.Value != nil || string(r.Key) != "k" {
		t.Fatalf("re-produced tombstone: key %q value %#v, want NULL", r.Key, r.Value)
	}
}

// TestTombstoneRefused: a tombstone with a payload, or a kafka.tombstone
// value other than true/false, fails Publish with a *relay.LimitError and
// sends nothing.
func TestTombstoneRefused(t *testing.T) {
	c := newCluster(t)
	topic := unique("tomb-bad")
	pub := relaytest.OpenPublisher(t, c.url())
	for _, m := range []*relay.Message{
		{ID: "payload", Payload: []byte("x"), Metadata: relay.Metadata{"kafka.tombstone": "true"}},
		{ID: "typo", Metadata: relay.Metadata{"kafka.tombstone": "yes"}},
	} {
		err := pub.Publish(context.Background(), topic, m)
		var le *relay.LimitError
		if !errors.As(err, &le) || le.MessageID != m.ID {
			t.Fatalf("%s: got %v, want a *relay.LimitError naming it", m.ID, err)
		}
	}
}

// TestRepeatedHeaders: a foreign record with repeated header names keeps
// every value: the first occurrence under its name, later ones as
// <name>#2, #3, ... (skipping numbers another header already uses). A
// repeated relay-id is metadata relay-id#2; a foreign kafka.tombstone
// header is kafka.tombstone#2 (the adapter owns that name); relay-md-x and
// x are the same metadata name, so the later is x#2. Publishing the
// message again keeps all of them.
func TestRepeatedHeaders(t *testing.T) {
	c := newCluster(t)
	topic, copyTopic := unique("rep"), unique("rep-copy")
	c.createTopic(t, topic, 1)
	c.createTopic(t, copyTopic, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	rec := &kgo.Record{Value: []byte("v"), Headers: []kgo.RecordHeader{
		h("h", "1"), h("h", "2"), h("relay-id", "first"), h("h#3", "literal"), h("h", "3"),
		h("relay-id", "second"), h("kafka.tombstone", "z"), h("relay-md-x", "a"), h("x", "b"),
	}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := relay.Metadata{
		"h": "1", "h#2": "2", "h#3": "literal", "h#4": "3",
		"relay-id#2": "second", "kafka.tombstone#2": "z", "x": "a", "x#2": "b",
	}
	check := func(m *relay.Message) {
		t.Helper()
		if m.ID != "first" || string(m.Payload) != "v" || len(m.Metadata) != len(want) {
			t.Fatalf("got ID %q payload %q metadata %v, want ID first and %v", m.ID, m.Payload, m.Metadata, want)
		}
		for k, v := range want {
			if m.Metadata[k] != v {
				t.Fatalf("metadata %q = %q, want %q (all: %v)", k, m.Metadata[k], v, m.Metadata)
			}
		}
	}
	sub := relaytest.OpenSubscriber(t, c.subURL(unique("g")))
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, ch)
	check(m)
	_ = m.Ack()

	pub := relaytest.OpenPublisher(t, c.url())
	if err := pub.Publish(ctx, copyTopic, m); err != nil {
		t.Fatal(err)
	}
	ch2, err := sub.Subscribe(ctx, copyTopic)
	if err != nil {
		t.Fatal(err)
	}
	m2 := recv(t, ch2)
	check(m2)
	_ = m2.Ack()
}
