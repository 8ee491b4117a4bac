package gcppubsub_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/gcppubsub"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestInteropForeignPublisher publishes with the Pub/Sub client library
// (ordering keys, attributes) and receives with relay: the server's
// message ID is the ID, the ordering key the Key, the attributes the
// metadata, and the messages of one key arrive in order on an ordered
// subscription.
func TestInteropForeignPublisher(t *testing.T) {
	tg := newTarget(t)
	topic, group := tg.topic(t, "interop-in-"), newName("g")
	sub := relaytest.OpenSubscriber(t, tg.subURL(group, "ordered", "true"))
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)

	raw := tg.raw(t)
	p := raw.Publisher(topic)
	p.EnableMessageOrdering = true
	defer p.Stop()
	type sent struct {
		id  string
		msg *pubsub.Message
	}
	var all []sent
	for i := range 12 {
		m := &pubsub.Message{
			Data:        []byte(fmt.Sprintf("foreign %d", i)),
			Attributes:  map[string]string{"content-type": "text/plain", "seq": fmt.Sprint(i)},
			OrderingKey: fmt.Sprintf("key-%d", i%3),
		}
		if i == 11 {
			m.OrderingKey, m.Attributes = "", nil // no key, no attributes
		}
		id, err := p.Publish(context.Background(), m).Get(context.Background())
		if err != nil {
			t.Fatalf("raw Publish: %v", err)
		}
		all = append(all, sent{id, m})
	}
	byID := map[string]*pubsub.Message{}
	for _, s := range all {
		byID[s.id] = s.msg
	}
	lastSeq := map[string]string{}
	for range all {
		got := relaytest.Next(t, ch, "foreign message")
		want, ok := byID[got.ID]
		if !ok {
			t.Fatalf("unexpected ID %q (want the server's message IDs)", got.ID)
		}
		delete(byID, got.ID)
		if got.Key != want.OrderingKey || !bytes.Equal(got.Payload, want.Data) || !maps.Equal(got.Metadata, relay.Metadata(want.Attributes)) {
			t.Errorf("message %s: Key %q payload %q metadata %v, want %q %q %v", got.ID, got.Key, got.Payload, got.Metadata, want.OrderingKey, want.Data, want.Attributes)
		}
		if got.Key != "" {
			if prev, ok := lastSeq[got.Key]; ok && prev > got.Metadata["seq"] && len(prev) == len(got.Metadata["seq"]) {
				t.Errorf("key %s: seq %s after %s", got.Key, got.Metadata["seq"], prev)
			}
			lastSeq[got.Key] = got.Metadata["seq"]
		}
		if err := got.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d messages from the client library received with their server IDs, ordering keys and attributes", len(all))
}

// TestInteropForeignSubscriber publishes with relay and receives with the
// client library's streaming subscriber: the payload is the data, Key
// the ordering key, metadata the attributes and the ID the attribute
// relay-id; metadata Pub/Sub cannot carry as an attribute (a value over
// 1024 bytes) is packed before the payload, as documented.
func TestInteropForeignSubscriber(t *testing.T) {
	tg := newTarget(t)
	topic, group := tg.topic(t, "interop-out-"), newName("g")
	sub := relaytest.OpenSubscriber(t, tg.subURL(group))
	relaytest.Provision(t, sub.(relay.Provisioner), topic) // the group's subscription, which the raw client reads
	pub := relaytest.OpenPublisher(t, tg.base)
	msgs := []*relay.Message{
		{ID: relay.NewID(), Key: "k1", Payload: []byte("one"), Metadata: relay.Metadata{"trace": "abc", "empty": ""}},
		{ID: relay.NewID(), Key: "k1", Payload: []byte{0, 1, 2, 255}},
		{ID: relay.NewID(), Payload: []byte("long"), Metadata: relay.Metadata{"short": "s", "long": strings.Repeat("x", 2000)}},
	}
	relaytest.Publish(t, pub, topic, msgs...)

	raw := tg.raw(t).Subscriber(gcppubsub.SubscriptionID(topic, group))
	var mu sync.Mutex
	got := map[string]*pubsub.Message{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := raw.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		got[m.Attributes[gcppubsub.AttrID]] = m
		if len(got) == len(msgs) {
			cancel()
		}
	})
	if err != nil {
		t.Fatalf("raw Receive: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range msgs[:2] {
		m := got[want.ID]
		if m == nil {
			t.Fatalf("message %s not received by the client library", want.ID)
		}
		attrs := maps.Clone(m.Attributes)
		delete(attrs, gcppubsub.AttrID)
		if m.OrderingKey != want.Key || !bytes.Equal(m.Data, want.Payload) || !maps.Equal(relay.Metadata(attrs), want.Metadata) && len(attrs)+len(want.Metadata) > 0 {
			t.Errorf("message %s: ordering key %q data %q attributes %v, want %q %q %v", want.ID, m.OrderingKey, m.Data, attrs, want.Key, want.Payload, want.Metadata)
		}
	}
	packed := got[msgs[2].ID]
	if packed == nil {
		t.Fatalf("message %s not received by the client library", msgs[2].ID)
	}
	if packed.Attributes["short"] != "s" || packed.Attributes[gcppubsub.AttrPacked] == "" || !bytes.HasSuffix(packed.Data, []byte("long")) {
		t.Errorf("packed message: attributes %v, data of %d bytes; want short=s as an attribute, %s set and the payload last", packed.Attributes, len(packed.Data), gcppubsub.AttrPacked)
	}
	t.Logf("%d relay messages read by the client library: ordering keys, attributes and relay-id as documented", len(msgs))
}
