package drivertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

func nackRedelivery(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)

	m := relay.NewMessage([]byte("try again"))
	m.Metadata = relay.Metadata{"h": "v"}
	publish(t, pub, topic, m)
	first := e.next(t, ch, "first delivery")
	if first.ID != m.ID || first.Attempt() != 1 {
		t.Fatalf("first delivery: ID %s attempt %d, want %s attempt 1", first.ID, first.Attempt(), m.ID)
	}
	if err := first.Nack(); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	second := e.next(t, ch, "redelivery after Nack")
	if second.ID != m.ID {
		t.Fatalf("redelivered %s, want %s", second.ID, m.ID)
	}
	if second.Attempt() != 2 {
		t.Errorf("redelivery Attempt() = %d, want 2", second.Attempt())
	}
	if !samePayload(second.Payload, m.Payload) || !sameMetadata(second.Metadata, m.Metadata) {
		t.Errorf("redelivered message differs from the original")
	}

	const delay = 1500 * time.Millisecond
	start := time.Now()
	if err := second.NackAfter(delay); err != nil {
		t.Fatalf("NackAfter: %v", err)
	}
	third := e.next(t, ch, "redelivery after NackAfter")
	waited := time.Since(start)
	if third.ID != m.ID {
		t.Fatalf("redelivered %s, want %s", third.ID, m.ID)
	}
	if third.Attempt() != 3 {
		t.Errorf("Attempt() after NackAfter = %d, want 3", third.Attempt())
	}
	// A semantic check, not a performance one: the redelivery must not come early.
	if waited < delay-100*time.Millisecond {
		t.Errorf("NackAfter(%v) redelivered after %v", delay, waited)
	}
	if err := third.Ack(); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if extra := none(ch, 500*time.Millisecond); extra != nil {
		t.Errorf("acked message delivered again (ID %s, attempt %d)", extra.ID, extra.Attempt())
	}
	t.Logf("attempts 1 → Nack → 2 → NackAfter(%v) → 3 after %v", delay, waited.Round(time.Millisecond))
}

func holdUnacked(t *testing.T, e *env, ch <-chan *relay.Message, n int) []*relay.Message {
	held := make([]*relay.Message, 0, n)
	for len(held) < n {
		held = append(held, e.next(t, ch, "unacked delivery"))
	}
	return held
}

func redeliveryAfterClose(t *testing.T, e *env) {
	e.needRedelivery(t)
	topic, group := e.h.NewTopic(t), e.h.NewGroup(t)
	pub := e.pub(t)
	s1 := e.h.NewSubscriber(t, group)
	provision(t, s1, topic)
	ch1, _ := subscribe(t, s1, topic)
	msgs := make([]*relay.Message, 5)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("unacked %d", i)))
	}
	publish(t, pub, topic, msgs...)
	held := holdUnacked(t, e, ch1, len(msgs))
	if err := s1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, m := range held {
		if err := m.Ack(); !errors.Is(err, relay.ErrSubscriptionEnded) {
			t.Errorf("Ack after Close = %v, want ErrSubscriptionEnded", err)
		}
	}
	s2 := e.sub(t, group)
	ch2, _ := subscribe(t, s2, topic)
	start := time.Now()
	e.collect(t, ch2, ids(msgs), true)
	t.Logf("%d unacked messages redelivered to another member %v after Close", len(msgs), time.Since(start).Round(time.Millisecond))
}

func redeliveryAfterCancel(t *testing.T, e *env) {
	e.needRedelivery(t)
	topic, group := e.h.NewTopic(t), e.h.NewGroup(t)
	pub := e.pub(t)
	sub := e.sub(t, group)
	provision(t, sub, topic)
	ch, cancel := subscribe(t, sub, topic)
	msgs := make([]*relay.Message, 3)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("cancelled %d", i)))
	}
	publish(t, pub, topic, msgs...)
	holdUnacked(t, e, ch, len(msgs))
	cancel()
	expectClosed(t, ch, "cancelled subscription", 10*time.Second)
	ch2, _ := subscribe(t, sub, topic)
	e.collect(t, ch2, ids(msgs), true)
	t.Logf("%d messages released by a cancelled subscription and received by a new one", len(msgs))
}
