package amqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// TestSingleActiveConsumer: with single_active_consumer=true, the first
// member of a group receives every message while the second waits
// (Assignment: active true and false); when the first closes with
// messages unacked, the second takes over and receives them and the rest,
// in publish order.
func TestSingleActiveConsumer(t *testing.T) {
	c := newCleaner(t)
	topic, group := unique("sac"), unique("g")
	a := openSub(t, c, group, "single_active_consumer", "true", "inflight", "4")
	b := openSub(t, c, group, "single_active_consumer", "true", "inflight", "4")
	if err := a.Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cha, err := a.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // a registers as the active consumer first
	chb, err := b.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	pub := openPub(t)
	var msgs []*relay.Message
	for i := range 10 {
		msgs = append(msgs, &relay.Message{ID: fmt.Sprintf("m%d", i), Payload: []byte{byte(i)}})
	}
	if err := pub.Publish(ctx, topic, msgs...); err != nil {
		t.Fatal(err)
	}
	next := func(ch <-chan *relay.Message) *relay.Message {
		select {
		case m := <-ch:
			return m
		case <-time.After(20 * time.Second):
			t.Fatal("no message within 20s")
		}
		return nil
	}
	for i := range 4 { // a's window; b receives nothing meanwhile
		m := next(cha)
		if m.ID != msgs[i].ID {
			t.Fatalf("active consumer got %s; want %s", m.ID, msgs[i].ID)
		}
		if i < 2 {
			_ = m.Ack()
		}
	}
	aa, err := a.Assignment(topic)
	if err != nil || aa.Mode != relay.ShareSingleActive || !aa.Active {
		t.Fatalf("a's assignment %+v, %v; want single-active, active", aa, err)
	}
	ba, err := b.Assignment(topic)
	if err != nil || ba.Mode != relay.ShareSingleActive || ba.Active {
		t.Fatalf("b's assignment %+v, %v; want single-active, waiting", ba, err)
	}
	select {
	case m := <-chb:
		t.Fatalf("the waiting consumer got %s", m.ID)
	default:
	}
	_ = a.Close() // m2 and m3 unacked go back to the queue
	// b gets the rest in order: m2 to m9, after m0 and m1 again if a's
	// acks had not reached the broker when it closed (at-least-once).
	var got []string
	for len(got) == 0 || got[len(got)-1] != "m9" {
		m := next(chb)
		got = append(got, m.ID)
		_ = m.Ack()
	}
	want := []string{"m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"}
	if len(got) < len(want) || fmt.Sprint(got[len(got)-len(want):]) != fmt.Sprint(want) {
		t.Fatalf("after the takeover got %v; want %v at the end", got, want)
	}
	if ba, err := b.Assignment(topic); !ba.Active {
		t.Fatalf("b's assignment %+v, %v after the takeover; want active", ba, err)
	}
}
