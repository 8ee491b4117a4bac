package mqtt_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/mqtt"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// rawSession connects a plain paho client as session id (clean session
// off) and returns what the broker sends it within wait, unacked, then
// disconnects: what the session holds.
func rawSession(t *testing.T, base, id string, wait time.Duration) []paho.Message {
	t.Helper()
	var mu sync.Mutex
	var got []paho.Message
	c := rawClient(base, id, false, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	})
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connecting as %s: %v", id, tok.Error())
	}
	time.Sleep(wait)
	c.Disconnect(100)
	mu.Lock()
	defer mu.Unlock()
	return got
}

// Provision creates the group's session: what is published before the
// first Subscribe is delivered to it, as first deliveries.
func TestProvisionKeepsMessages(t *testing.T) {
	base := mqttURL(t)
	topic, group := newName("prov/"), newName("g")
	sub := openSub(t, base, group)
	if err := sub.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	pub := openPub(t, base)
	msgs := make([]*relay.Message, 5)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprint("before subscribe ", i)))
	}
	if err := pub.Publish(context.Background(), topic, msgs...); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range receive(t, ch, len(msgs)) {
		if m.ID != msgs[i].ID || m.Attempt() != 1 {
			t.Errorf("delivery %d: %s attempt %d, want %s attempt 1", i, m.ID, m.Attempt(), msgs[i].ID)
		}
		_ = m.Ack()
	}
}

// A Nack sends no PUBACK: the message is delivered again in process, and
// the broker still holds it for the session, so that a process that dies
// before the final ack loses nothing. The broker resends it to the
// session's next connection, marked DUP.
func TestNackSendsNoPUBACK(t *testing.T) {
	base := mqttURL(t)
	topic, group := newName("nack/"), newName("g")
	var ids []string
	var mu sync.Mutex
	mqtt.TrackSessions(func(id string) { mu.Lock(); ids = append(ids, id); mu.Unlock(); trackSession(id) })
	defer mqtt.TrackSessions(trackSession)
	sub := openSub(t, base, group)
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage([]byte("nacked twice"))
	if err := openPub(t, base).Publish(context.Background(), topic, m); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		got := receive(t, ch, 1)[0]
		if got.ID != m.ID || got.Attempt() != attempt {
			t.Fatalf("got %s attempt %d, want %s attempt %d", got.ID, got.Attempt(), m.ID, attempt)
		}
		if err := got.Nack(); err != nil {
			t.Fatal(err)
		}
	}
	_ = receive(t, ch, 1) // attempt 3, left unsettled
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	session := ids[0]
	mu.Unlock()
	held := rawSession(t, base, session, 500*time.Millisecond)
	if len(held) != 1 || !held[0].Duplicate() {
		t.Fatalf("session %s holds %d messages after three deliveries and two Nacks, want the one, marked DUP", session, len(held))
	}
}

// Acks go in settlement order, not in the order of reception (MQTT 3.1.1
// asks for the latter; Mosquitto matches PUBACKs by packet identifier),
// and the broker has them when a subscription ends: the next subscription
// of the session, started at once, gets none of the acked messages back
// (round after round), and in the end the session holds nothing.
func TestAcksOutOfOrder(t *testing.T) {
	base := mqttURL(t)
	topic, group := newName("order/"), newName("g")
	var ids []string
	var mu sync.Mutex
	mqtt.TrackSessions(func(id string) { mu.Lock(); ids = append(ids, id); mu.Unlock(); trackSession(id) })
	defer mqtt.TrackSessions(trackSession)
	sub := openSub(t, base, group)
	pub := openPub(t, base)
	for round := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		msgs := make([]*relay.Message, 6)
		sent := map[string]bool{}
		for i := range msgs {
			msgs[i] = relay.NewMessage([]byte(fmt.Sprint(round, i)))
			sent[msgs[i].ID] = true
		}
		if err := pub.Publish(context.Background(), topic, msgs...); err != nil {
			t.Fatal(err)
		}
		got := receive(t, ch, len(msgs))
		for i := len(got) - 1; i >= 0; i-- {
			if !sent[got[i].ID] {
				t.Fatalf("round %d: %s (%s), acked in an earlier round, came back", round, got[i].ID, got[i].Payload)
			}
			if err := got[i].Ack(); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		for range ch {
		}
	}
	mu.Lock()
	session := ids[0]
	mu.Unlock()
	if held := rawSession(t, base, session, 300*time.Millisecond); len(held) != 0 {
		t.Fatalf("session %s holds %d messages after all were acked in reverse order", session, len(held))
	}
}

// Two subscriptions of one group and topic on one host get sessions 1 and
// 2; when the first ends, the next subscription takes session 1 again and
// with it the messages the first left unacked, their attempts counted on.
func TestSessionsPerHost(t *testing.T) {
	base := mqttURL(t)
	topic, group := newName("sess/"), newName("g")
	var ids []string
	var mu sync.Mutex
	mqtt.TrackSessions(func(id string) { mu.Lock(); ids = append(ids, id); mu.Unlock(); trackSession(id) })
	defer mqtt.TrackSessions(trackSession)
	s1, s2 := openSub(t, base, group, "instance", "i1"), openSub(t, base, group, "instance", "i1")
	ctx1, cancel1 := context.WithCancel(context.Background())
	ch1, err := s1.Subscribe(ctx1, topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Subscribe(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	want := []string{mqtt.SessionID(group, "i1", topic, 1), mqtt.SessionID(group, "i1", topic, 2)}
	mu.Lock()
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("sessions %v, want %v", ids, want)
	}
	mu.Unlock()
	// Round robin: s1's session gets every other message; s2 takes none
	// from its channel, so what reaches s1 is s1's.
	pub := openPub(t, base)
	for i := 0; i < 4; i++ {
		if err := pub.Publish(context.Background(), topic, relay.NewMessage([]byte(fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
	}
	held := receive(t, ch1, 2)
	if err := held[0].Nack(); err != nil {
		t.Fatal(err)
	}
	if again := receive(t, ch1, 1)[0]; again.ID != held[0].ID || again.Attempt() != 2 {
		t.Fatalf("after a Nack got %s attempt %d, want %s attempt 2", again.ID, again.Attempt(), held[0].ID)
	}
	cancel1()
	for range ch1 {
	}
	s3 := openSub(t, base, group, "instance", "i1")
	ch3, err := s3.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if last := ids[len(ids)-1]; last != want[0] {
		t.Errorf("the third subscription took session %s, want %s", last, want[0])
	}
	mu.Unlock()
	// Attempts go on from the first subscription's deliveries.
	want3 := map[string]int{held[0].ID: 3, held[1].ID: 2}
	for _, m := range receive(t, ch3, 2) {
		if m.Attempt() != want3[m.ID] {
			t.Errorf("released message %s: attempt %d, want %d", m.ID, m.Attempt(), want3[m.ID])
		}
		_ = m.Ack()
	}
}

// After a lost connection the broker resends what the session holds: a
// message acked while no connection was up is acked on the new one and
// not delivered again; one still unsettled is not delivered twice, and
// its ack goes on the new connection.
func TestResendAfterReconnect(t *testing.T) {
	base := mqttURL(t)
	proxied, proxy := testenv.ProxyURL(t, base)
	topic, group := newName("resend/"), newName("g")
	var ids []string
	var mu sync.Mutex
	mqtt.TrackSessions(func(id string) { mu.Lock(); ids = append(ids, id); mu.Unlock(); trackSession(id) })
	defer mqtt.TrackSessions(trackSession)
	sub := openSub(t, proxied, group)
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	a, b := relay.NewMessage([]byte("acked while down")), relay.NewMessage([]byte("held across"))
	if err := openPub(t, base).Publish(context.Background(), topic, a, b); err != nil {
		t.Fatal(err)
	}
	got := receive(t, ch, 2)
	proxy.Cut()
	hc := sub.(relay.HealthChecker)
	for hc.Health() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := got[0].Ack(); err != nil {
		t.Fatal(err)
	}
	proxy.Uncut()
	// The broker resends what the session holds first, then the rest.
	c := relay.NewMessage([]byte("after the reconnect"))
	if err := openPub(t, base).Publish(context.Background(), topic, c); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, ch, 1)[0]; m.ID != c.ID {
		t.Fatalf("%s (%s) delivered again after the reconnect", m.ID, m.Payload)
	} else {
		_ = m.Ack()
	}
	if err := got[1].Ack(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	session := ids[0]
	mu.Unlock()
	if held := rawSession(t, base, session, 500*time.Millisecond); len(held) != 0 {
		t.Fatalf("session %s holds %d messages: an ack did not reach the broker", session, len(held))
	}
}

// noneWithin returns a message delivered on ch within d, or nil.
func noneWithin(ch <-chan *relay.Message, d time.Duration) *relay.Message {
	select {
	case m := <-ch:
		return m
	case <-time.After(d):
		return nil
	}
}

// RemoveTopic removes the sessions of the topic that no subscription
// holds, with what they hold: a subscription started afterwards gets
// nothing published before.
func TestRemoveTopic(t *testing.T) {
	base := mqttURL(t)
	topic, group := newName("remove/"), newName("g")
	s1, s2 := openSub(t, base, group), openSub(t, base, group)
	p := s1.(interface {
		RemoveTopic(context.Context, string) error
	})
	ctx1, cancel1 := context.WithCancel(context.Background())
	ch1, err := s1.Subscribe(ctx1, topic)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	ch2, err := s2.Subscribe(ctx2, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := openPub(t, base).Publish(context.Background(), topic, relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b"))); err != nil {
		t.Fatal(err)
	}
	receive(t, ch1, 1) // one each, left unacked in sessions 1 and 2
	receive(t, ch2, 1)
	cancel1()
	cancel2()
	for range ch1 {
	}
	for range ch2 {
	}
	if err := p.RemoveTopic(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveTopic(context.Background(), topic); err != nil {
		t.Fatalf("second RemoveTopic: %v", err)
	}
	for n := 1; n <= 2; n++ {
		if held := rawSession(t, base, mqtt.SessionID(group, hostInstance(t), topic, n), 200*time.Millisecond); len(held) != 0 {
			t.Errorf("session %d holds %d messages after RemoveTopic", n, len(held))
		}
	}
}

// hostInstance is the default instance= (the host name).
func hostInstance(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// With retain=true, the broker sends the topic's retained message again
// (flagged retained) to every subscription made, also to shared ones:
// relay acks those copies without delivering them, so the group gets the
// message once, however often its subscriptions connect.
func TestRetainedDeliveredOnce(t *testing.T) {
	base := mqttURL(t)
	topic, group := newName("retain/"), newName("g")
	t.Cleanup(func() { // clear the topic's retained message
		c := rawClient(base, newName("clear-"), true, nil)
		if tok := c.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
			c.Publish(topic, 1, true, []byte{}).WaitTimeout(5 * time.Second)
			c.Disconnect(100)
		}
	})
	sub := openSub(t, base, group)
	if err := sub.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage([]byte("the last reading"))
	if err := openPub(t, base, "retain", "true").Publish(context.Background(), topic, m); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			if got := receive(t, ch, 1)[0]; got.ID != m.ID {
				t.Fatalf("got %s, want %s", got.ID, m.ID)
			} else {
				_ = got.Ack()
			}
		}
		if extra := noneWithin(ch, 300*time.Millisecond); extra != nil {
			t.Fatalf("subscription %d: %s delivered again (the retained copy)", round+1, extra.ID)
		}
		cancel()
		for range ch {
		}
	}
}

// The subscriber names its group (relay.GroupNamer), as every subscriber
// of the module does: the router's Group and the poison queue's
// PoisonGroupKey come from it.
func TestSubscriberNamesItsGroup(t *testing.T) {
	group := newName("g")
	if got := openSub(t, mqttURL(t), group).(relay.GroupNamer).Group(); got != group {
		t.Errorf("Group() = %q, want %q", got, group)
	}
}
