package gcppubsub_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/gcppubsub"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestOrdered: with ordered=true the group's subscription has message
// ordering, the capability says per key, and a key's messages arrive in
// publish order, also after a Nack (which brings the nacked message back
// before the key's later ones).
func TestOrdered(t *testing.T) {
	tg := newTarget(t)
	topic, group := tg.topic(t, "ordered-"), newName("g")
	sub := relaytest.OpenSubscriber(t, tg.subURL(group, "ordered", "true"))
	if got := sub.(relay.CapabilityReporter).Capabilities().Ordering; got != relay.OrderPerKey {
		t.Fatalf("Ordering = %q, want %q", got, relay.OrderPerKey)
	}
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	s, err := tg.raw(t).SubscriptionAdminClient.GetSubscription(context.Background(),
		&pb.GetSubscriptionRequest{Subscription: "projects/" + tg.project() + "/subscriptions/" + gcppubsub.SubscriptionID(topic, group)})
	if err != nil || !s.GetEnableMessageOrdering() {
		t.Fatalf("subscription: ordering %v, err %v; want ordering on", s.GetEnableMessageOrdering(), err)
	}
	ch, _ := relaytest.Subscribe(t, sub, topic)
	pub := relaytest.OpenPublisher(t, tg.base)
	const n, keys = 60, 3
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = &relay.Message{ID: relay.NewID(), Key: fmt.Sprintf("k%d", i%keys), Payload: []byte(fmt.Sprint(i))}
	}
	for i := 0; i < n; i += 20 {
		relaytest.Publish(t, pub, topic, msgs[i:i+20]...)
	}
	pos := map[string]int{}
	for i, m := range msgs {
		pos[m.ID] = i
	}
	last := map[string]int{}
	nacked := false
	for acked := 0; acked < n; {
		m := relaytest.Next(t, ch, "ordered delivery")
		p := pos[m.ID]
		if prev, ok := last[m.Key]; ok && p < prev {
			t.Errorf("key %s: message #%d after #%d", m.Key, p, prev)
		}
		if p == 10 && !nacked { // once: it must come back before #13, #16, ... of its key
			nacked = true
			_ = m.Nack()
			continue
		}
		last[m.Key] = p
		_ = m.Ack()
		acked++
	}
	t.Logf("%d messages over %d keys in order per key, with a Nack of #10 in between", n, keys)
}

// TestDeadLetter: max_delivery_attempts=5 gives the group's subscription
// a dead-letter topic ("<subscription>-dlq") whose own subscription for
// the group keeps what it receives; Attempt is Pub/Sub's delivery count;
// a message nacked five times arrives there with its ID, Key, metadata
// and payload.
func TestDeadLetter(t *testing.T) {
	tg := newTarget(t)
	topic, group := tg.topic(t, "dlq-"), newName("g")
	sub := relaytest.OpenSubscriber(t, tg.subURL(group, "max_delivery_attempts", "5"))
	if !sub.(relay.CapabilityReporter).Capabilities().AttemptFromBroker {
		t.Errorf("AttemptFromBroker false with a dead-letter policy")
	}
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	pub := relaytest.OpenPublisher(t, tg.base)
	m := &relay.Message{ID: relay.NewID(), Key: "k", Payload: []byte("poison"), Metadata: relay.Metadata{"why": "test"}}
	relaytest.Publish(t, pub, topic, m)
	for want := 1; want <= 5; want++ {
		got := relaytest.Next(t, ch, "delivery")
		if got.ID != m.ID || got.Attempt() != want {
			t.Fatalf("delivery %d: ID %s attempt %d", want, got.ID, got.Attempt())
		}
		_ = got.Nack()
	}
	if extra := relaytest.Quiet(ch, time.Second); extra != nil {
		t.Fatalf("delivered a sixth time (attempt %d) instead of dead-lettered", extra.Attempt())
	}
	dlq := gcppubsub.SubscriptionID(topic, group) + "-dlq"
	tg.dropAtEnd(t, dlq)
	dlqCh, _ := relaytest.Subscribe(t, sub, dlq)
	dead := relaytest.Next(t, dlqCh, "dead letter")
	if dead.ID != m.ID || dead.Key != m.Key || !bytes.Equal(dead.Payload, m.Payload) || dead.Metadata["why"] != "test" {
		t.Errorf("dead letter %s key %q payload %q metadata %v, want %s %q %q why=test", dead.ID, dead.Key, dead.Payload, dead.Metadata, m.ID, m.Key, m.Payload)
	}
	_ = dead.Ack()
	t.Logf("nacked 5 times (attempts 1-5 from Pub/Sub), then read from %s", dlq)
}

// TestPacking round-trips through the server what Pub/Sub attributes
// cannot carry: 150 metadata entries, values over 1024 bytes, names over
// 256 bytes, starting with "goog" or equal to relay's own attributes,
// invalid UTF-8 in names, values and the ID, an empty name.
func TestPacking(t *testing.T) {
	tg := newTarget(t)
	topic, group := tg.topic(t, "packing-"), newName("g")
	sub := relaytest.OpenSubscriber(t, tg.subURL(group))
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	pub := relaytest.OpenPublisher(t, tg.base)
	md := relay.Metadata{}
	for i := range 150 {
		md[fmt.Sprintf("k%03d", i)] = fmt.Sprint(i)
	}
	md["long"] = strings.Repeat("v", 5000)
	md[strings.Repeat("n", 300)] = "long name"
	md["googthing"] = "reserved prefix"
	md[gcppubsub.AttrID] = "not the ID"
	md[gcppubsub.AttrPacked] = "not a length"
	md["bad\xffname"] = "bad\xfevalue"
	md[""] = "empty name"
	msgs := []*relay.Message{
		{ID: relay.NewID(), Payload: []byte("many"), Metadata: md},
		{ID: "id-\xff\xfe", Key: "k", Payload: []byte{0, 1, 2}},
	}
	relaytest.Publish(t, pub, topic, msgs...)
	for range msgs {
		got := relaytest.Next(t, ch, "packed message")
		var want *relay.Message
		for _, m := range msgs {
			if m.ID == got.ID {
				want = m
			}
		}
		if want == nil {
			t.Fatalf("unexpected ID %q", got.ID)
		}
		if !bytes.Equal(got.Payload, want.Payload) || got.Key != want.Key || !maps.Equal(got.Metadata, want.Metadata) && len(got.Metadata)+len(want.Metadata) > 0 {
			t.Errorf("message %q differs: payload %q key %q, %d metadata entries (want %d)", got.ID, got.Payload, got.Key, len(got.Metadata), len(want.Metadata))
		}
		_ = got.Ack()
	}
	if tg.srv != nil {
		for _, m := range tg.srv.Fake().Messages() {
			if m.Topic == "projects/"+tg.project()+"/topics/"+topic && len(m.Attributes) > gcppubsub.MaxAttributes {
				t.Errorf("message %s sent with %d attributes, over Pub/Sub's %d", m.ID, len(m.Attributes), gcppubsub.MaxAttributes)
			}
		}
	}
}

// TestLeaseExtended: a message held past the subscription's ack deadline
// (2 s here; the fake takes less than the service's 10 s minimum) is not
// delivered again (to this member or another of the group) while held, because the
// subscription extends it; released, the other member gets it at once.
func TestLeaseExtended(t *testing.T) {
	tg := newTarget(t)
	if tg.srv == nil {
		t.Skip("SKIP: Pub/Sub takes ack deadlines of 10 s or more; this check uses 2 s on the fake")
	}
	topic, group := tg.topic(t, "lease-"), newName("g")
	s1 := relaytest.OpenSubscriber(t, tg.subURL(group, "ack_deadline", "2s"))
	relaytest.Provision(t, s1.(relay.Provisioner), topic)
	ctx1, cancel1 := context.WithCancel(context.Background())
	ch1, err := s1.Subscribe(ctx1, topic)
	if err != nil {
		t.Fatal(err)
	}
	relaytest.Publish(t, relaytest.OpenPublisher(t, tg.base), topic, relay.NewMessage([]byte("slow work")))
	held := relaytest.Next(t, ch1, "first member")
	ch2, _ := relaytest.Subscribe(t, relaytest.OpenSubscriber(t, tg.subURL(group, "ack_deadline", "2s")), topic)
	select {
	case m := <-ch1:
		t.Fatalf("message delivered again to the first member while it held it (%s): lease not extended", m.ID)
	case m := <-ch2:
		t.Fatalf("message delivered to the second member while the first held it (%s): lease not extended", m.ID)
	case <-time.After(5 * time.Second):
	}
	cancel1() // released: the other member gets it at once
	got := relaytest.Next(t, ch2, "released message")
	if got.ID != held.ID || got.Attempt() != 1 && got.Attempt() != 2 {
		t.Errorf("second member got %s attempt %d, want %s", got.ID, got.Attempt(), held.ID)
	}
	_ = got.Ack()
}

// TestExistingSubscription: an existing subscription is used as it is,
// but one without ordering is refused for ordered=true, and one bound to
// another topic is refused, each with an error naming the subscription.
func TestExistingSubscription(t *testing.T) {
	tg := newTarget(t)
	topic, other, group := tg.topic(t, "exists-"), tg.topic(t, "other-"), newName("g")
	plain := relaytest.OpenSubscriber(t, tg.subURL(group))
	relaytest.Provision(t, plain.(relay.Provisioner), topic)
	ctx := context.Background()
	err := relaytest.OpenSubscriber(t, tg.subURL(group, "ordered", "true")).(relay.Provisioner).Provision(ctx, topic)
	if err == nil || !strings.Contains(err.Error(), "without message ordering") {
		t.Errorf("ordered=true on an unordered subscription: %v, want an error saying so", err)
	}
	// The subscription <other>-<group> bound to topic instead of other.
	raw := tg.raw(t).SubscriptionAdminClient
	name := "projects/" + tg.project() + "/subscriptions/" + gcppubsub.SubscriptionID(other, group)
	if _, err := raw.CreateSubscription(ctx, &pb.Subscription{Name: name, Topic: "projects/" + tg.project() + "/topics/" + topic}); err != nil {
		t.Fatal(err)
	}
	if err := plain.(relay.Provisioner).Provision(ctx, other); err == nil || !strings.Contains(err.Error(), "is bound to") {
		t.Errorf("a subscription bound to another topic: %v, want an error saying so", err)
	}
}

// TestCheckGroups: a topic that is missing or has no subscription would
// drop what is published to it now (relay.ErrNoGroup, naming what the
// service showed); once a group is provisioned it has one. Lag is not
// reported.
func TestCheckGroups(t *testing.T) {
	tg := newTarget(t)
	topic, group := tg.topic(t, "groups-"), newName("g")
	gc := relaytest.OpenPublisher(t, tg.base).(relay.GroupChecker)
	ctx := context.Background()
	// The service says the topic does not exist; pstest lists no
	// subscriptions of a topic it does not have.
	if err := gc.CheckGroups(ctx, topic); !errors.Is(err, relay.ErrNoGroup) {
		t.Errorf("missing topic: %v, want ErrNoGroup", err)
	}
	raw := tg.raw(t)
	if _, err := raw.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: "projects/" + tg.project() + "/topics/" + topic}); err != nil {
		t.Fatal(err)
	}
	if err := gc.CheckGroups(ctx, topic); !errors.Is(err, relay.ErrNoGroup) || !strings.Contains(err.Error(), "no subscription") {
		t.Errorf("topic without subscriptions: %v, want ErrNoGroup saying it has none", err)
	}
	sub := relaytest.OpenSubscriber(t, tg.subURL(group))
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	if err := gc.CheckGroups(ctx, topic); err != nil {
		t.Errorf("after Provision: %v, want nil", err)
	}
	if _, err := sub.(relay.LagReporter).Lag(ctx, topic); !errors.Is(err, relay.ErrNotSupported) {
		t.Errorf("Lag: %v, want relay.ErrNotSupported", err)
	}
}

// TestLimits: what Pub/Sub cannot take is refused before anything is
// sent, with typed errors.
func TestLimits(t *testing.T) {
	tg := newTarget(t)
	pub := relaytest.OpenPublisher(t, tg.base)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		m    *relay.Message
	}{
		{"key over 1024 bytes", &relay.Message{Key: strings.Repeat("k", 1025)}},
		{"key not UTF-8", &relay.Message{Key: "\xff"}},
		{"over 10 MB", &relay.Message{Payload: make([]byte, gcppubsub.MaxMessageBytes)}},
	} {
		if err := pub.Publish(ctx, "limits-topic", c.m); !errors.Is(err, relay.ErrLimit) {
			t.Errorf("%s: %v, want relay.ErrLimit", c.name, err)
		}
	}
	for _, topic := range []string{"ab", "1abc", "goog-x", "a/b", strings.Repeat("t", 256)} {
		if err := pub.Publish(ctx, topic, relay.NewMessage(nil)); !errors.Is(err, relay.ErrInvalidTopic) {
			t.Errorf("topic %q: %v, want relay.ErrInvalidTopic", topic, err)
		}
	}
}

// TestURL: parameters are checked with errors naming them.
func TestURL(t *testing.T) {
	for raw, param := range map[string]string{
		"gcppubsub://p?group=g&bogus=1":                          "bogus",
		"gcppubsub://p?group=g&ack_deadline=700s":                "ack_deadline",
		"gcppubsub://p?group=g&max_delivery_attempts=3":          "max_delivery_attempts",
		"gcppubsub://p?group=g&dead_letter_topic=dlq-x":          "dead_letter_topic",
		"gcppubsub://p?group=g&ordered=true&pullers=2":           "pullers",
		"gcppubsub://p?group=a/b":                                "group",
		"gcppubsub://p?group=g&emulator=h:1&endpoint=h:2":        "emulator",
		"gcppubsub://p?group=g&emulator=h:1&credentials=/k.json": "emulator",
		"gcppubsub://p": "group",
	} {
		err := relay.CheckSubscriberURL(raw)
		var ue *relay.URLError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), fmt.Sprintf("%q", param)) {
			t.Errorf("%s: %v, want an error naming %q", raw, err, param)
		}
	}
	for _, raw := range []string{"gcppubsub://", "gcppubsub://p/path", "gcppubsub://u@p", "gcppubsub://p:8085"} {
		if err := relay.CheckURL(raw); !errors.Is(err, relay.ErrBadURL) {
			t.Errorf("%s: %v, want relay.ErrBadURL", raw, err)
		}
	}
	if err := relay.CheckSubscriberURL("gcppubsub://my-project?group=g&ordered=true&max_delivery_attempts=5&dead_letter_topic=dead&ack_deadline=60s&inflight=100&inflight_bytes=8MiB&receive_timeout=30s&create_topics=false&emulator=localhost:8085"); err != nil {
		t.Errorf("a URL with every parameter: %v", err)
	}
}

// The subscriber names its group (relay.GroupNamer), as every subscriber
// of the module does: the router's Group and the poison queue's
// PoisonGroupKey come from it.
func TestSubscriberNamesItsGroup(t *testing.T) {
	tg := newTarget(t)
	group := newName("g")
	if got := relaytest.OpenSubscriber(t, tg.subURL(group)).(relay.GroupNamer).Group(); got != group {
		t.Errorf("Group() = %q, want %q", got, group)
	}
}

// TestAdaptiveWindow: with inflight= unset, a subscription whose handler
// keeps up with a backlog grows its window (and its Pull size) from
// DefaultInFlight: more than that reach a handler that then stops acking.
func TestAdaptiveWindow(t *testing.T) {
	tg := newTarget(t)
	topic := tg.topic(t, "adaptive-")
	sub := relaytest.OpenSubscriber(t, tg.subURL(newName("g")))
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	relaytest.WindowGrows(t, relaytest.OpenPublisher(t, tg.base), sub, topic,
		relaytest.WindowCase{N: 3100, Acked: 2000, Start: gcppubsub.DefaultInFlight, Max: driver.DefaultMaxInFlight, Unordered: true})
}
