package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// The checks in this file pin down the points of the contract that are
// easy to get subtly wrong under pressure: assigned IDs, repeated
// settlements, what a closed channel means, and NackAfter across the end
// of a subscription and against the in-flight window.

// isUUIDv7 reports whether s is a canonical lowercase UUID of version 7
// and the RFC 9562 variant.
func isUUIDv7(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return s[14] == '7' && (s[19] == '8' || s[19] == '9' || s[19] == 'a' || s[19] == 'b')
}

// emptyID: Publish gives a message without ID a fresh UUIDv7, writes it
// into the caller's message, and the subscriber receives that ID.
func emptyID(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)

	one := &relay.Message{Payload: []byte("no id")}
	publish(t, pub, topic, one)
	a, b := &relay.Message{Payload: []byte("no id a")}, &relay.Message{Payload: []byte("no id b")}
	publish(t, pub, topic, a, b)
	sent := []*relay.Message{one, a, b}
	for _, m := range sent {
		if !isUUIDv7(m.ID) {
			t.Fatalf("after Publish, m.ID = %q, want a UUIDv7 assigned to the caller's message", m.ID)
		}
	}
	if a.ID == b.ID {
		t.Fatalf("two messages of one batch got the same ID %s", a.ID)
	}
	want := map[string][]byte{}
	for _, m := range sent {
		want[m.ID] = m.Payload
	}
	for range sent {
		got := e.next(t, ch, "message published without ID")
		p, ok := want[got.ID]
		if !ok {
			t.Fatalf("delivered ID %q is none of the assigned IDs %s, %s, %s", got.ID, one.ID, a.ID, b.ID)
		}
		if !samePayload(got.Payload, p) {
			t.Errorf("message %s: payload %q, want %q", got.ID, got.Payload, p)
		}
		delete(want, got.ID)
		if err := got.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	t.Logf("assigned IDs %s, %s, %s arrived unchanged", one.ID, a.ID, b.ID)
}

// repeatedSettlement: the first settlement wins. Settling the same way
// again returns nil and changes nothing (a Nack after NackAfter does not
// cut the delay short), the other way ErrAlreadySettled, also after the
// subscription ended.
func repeatedSettlement(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, cancel := subscribe(t, sub, topic)
	m := relay.NewMessage([]byte("settled twice"))
	publish(t, pub, topic, m)

	first := e.next(t, ch, "first delivery")
	const delay = 2 * time.Second
	start := time.Now()
	if err := first.NackAfter(delay); err != nil {
		t.Fatalf("NackAfter: %v", err)
	}
	if err := first.NackAfter(time.Millisecond); err != nil {
		t.Errorf("NackAfter after NackAfter = %v, want nil", err)
	}
	if err := first.Nack(); err != nil {
		t.Errorf("Nack after NackAfter = %v, want nil", err)
	}
	if err := first.Ack(); !errors.Is(err, relay.ErrAlreadySettled) {
		t.Errorf("Ack after NackAfter = %v, want ErrAlreadySettled", err)
	}
	second := e.next(t, ch, "redelivery after NackAfter, Nack")
	waited := time.Since(start)
	if second.ID != m.ID {
		t.Fatalf("redelivered %s, want %s", second.ID, m.ID)
	}
	// A semantic check: the later Nack must not have cut the first delay.
	if waited < delay-100*time.Millisecond {
		t.Errorf("NackAfter(%v) followed by Nack redelivered after %v: the second settlement changed the first", delay, waited)
	}
	if second.Attempt() != 2 {
		t.Errorf("Attempt() = %d after one NackAfter and repeats, want 2", second.Attempt())
	}
	if extra := none(ch, 500*time.Millisecond); extra != nil {
		t.Errorf("message %s delivered again (attempt %d): a repeated settlement reached the broker", extra.ID, extra.Attempt())
	}

	if err := second.Ack(); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if err := second.Ack(); err != nil {
		t.Errorf("Ack after Ack = %v, want nil", err)
	}
	for name, settle := range map[string]func() error{
		"Nack":           second.Nack,
		"NackAfter(1ms)": func() error { return second.NackAfter(time.Millisecond) },
	} {
		if err := settle(); !errors.Is(err, relay.ErrAlreadySettled) {
			t.Errorf("%s after Ack = %v, want ErrAlreadySettled", name, err)
		}
	}
	cancel()
	expectClosed(t, ch, "cancelled subscription", 10*time.Second)
	if err := second.Ack(); err != nil {
		t.Errorf("Ack after Ack, once the subscription ended = %v, want nil (the first settlement wins)", err)
	}
	if err := second.Nack(); !errors.Is(err, relay.ErrAlreadySettled) {
		t.Errorf("Nack after Ack, once the subscription ended = %v, want ErrAlreadySettled", err)
	}
	t.Logf("NackAfter(%v) then NackAfter(1ms) and Nack: redelivered once, after %v", delay, waited.Round(time.Millisecond))
}

// drainUntil receives from ch, acking everything, until every ID in want
// was seen, then a little longer; it returns how often each ID came.
func (e *env) drainUntil(t *testing.T, ch <-chan *relay.Message, want map[string]bool) map[string]int {
	t.Helper()
	seen := e.collect(t, ch, want, true)
	for {
		m := none(ch, 500*time.Millisecond)
		if m == nil {
			return seen
		}
		seen[m.ID]++
		_ = m.Ack()
	}
}

// closedChannelAcked: acks made before a subscription ended are at the
// broker once its channel closed: a new subscription of the group gets
// none of the acked messages.
func closedChannelAcked(t *testing.T, e *env) {
	topic, group := e.h.NewTopic(t), e.h.NewGroup(t)
	pub := e.pub(t)
	s1 := e.sub(t, group)
	provision(t, s1, topic)
	ch1, cancel := subscribe(t, s1, topic)
	msgs := make([]*relay.Message, 5)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("acked %d", i)))
		msgs[i].Key = "one-key" // one partition where the backend has them
	}
	publish(t, pub, topic, msgs...)
	e.collect(t, ch1, ids(msgs), true)
	cancel()
	expectClosed(t, ch1, "cancelled subscription", 30*time.Second)

	s2 := e.sub(t, group)
	ch2, _ := subscribe(t, s2, topic)
	sentinel := relay.NewMessage([]byte("sentinel"))
	sentinel.Key = "one-key"
	publish(t, pub, topic, sentinel)
	seen := e.drainUntil(t, ch2, ids([]*relay.Message{sentinel}))
	for i, m := range msgs {
		if seen[m.ID] > 0 {
			t.Errorf("message %d (%s), acked before the channel closed, delivered to the new subscription", i, m.ID)
		}
	}
	t.Logf("%d messages acked, subscription ended: the next subscription of the group got only the new message", len(msgs))
}

// closedChannelUnsettled: one message left unsettled among acked ones is
// released to the group when the subscription ends; a new subscription
// gets it, and gets acked messages again only where the backend declares
// AckedAfterUnsettledRedelivered (then exactly those acked after it).
func closedChannelUnsettled(t *testing.T, e *env) {
	e.needRedelivery(t)
	topic, group := e.h.NewTopic(t), e.h.NewGroup(t)
	pub := e.pub(t)
	s1 := e.sub(t, group)
	provision(t, s1, topic)
	ch1, cancel := subscribe(t, s1, topic)
	msgs := make([]*relay.Message, 5)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("message %d", i)))
		msgs[i].Key = "one-key" // one partition where the backend has them
	}
	publish(t, pub, topic, msgs...)
	// In delivery order: ack all but the third.
	const keep = 2
	var order []*relay.Message
	for range msgs {
		m := e.next(t, ch1, "first delivery")
		order = append(order, m)
	}
	for i, m := range order {
		if i == keep {
			continue
		}
		if err := m.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	unsettled := order[keep]
	cancel()
	expectClosed(t, ch1, "cancelled subscription", 30*time.Second)

	s2 := e.sub(t, group)
	ch2, _ := subscribe(t, s2, topic)
	sentinel := relay.NewMessage([]byte("sentinel"))
	sentinel.Key = "one-key"
	publish(t, pub, topic, sentinel)
	want := ids([]*relay.Message{unsettled, sentinel})
	redelivered := e.caps.AckedAfterUnsettledRedelivered
	if redelivered {
		for _, m := range order[keep+1:] {
			want[m.ID] = true
		}
	}
	seen := e.drainUntil(t, ch2, want)
	for i, m := range order {
		switch {
		case i == keep:
		case i > keep && redelivered:
		case seen[m.ID] > 0:
			t.Errorf("message %d of the delivery order (%s), acked before the channel closed, delivered to the new subscription (AckedAfterUnsettledRedelivered=%v)", i, m.ID, redelivered)
		}
	}
	if redelivered {
		t.Logf("the unsettled message and the %d acked after it were delivered again, as declared by AckedAfterUnsettledRedelivered", len(order)-keep-1)
	} else {
		t.Logf("only the unsettled message of %d was delivered again", len(order))
	}
}

// nackAfterAcrossEnd: a message nacked with a delay, then its subscription
// ended, comes back to the group; with a native delay not before the
// delay, with an emulated one at any time.
func nackAfterAcrossEnd(t *testing.T, e *env) {
	e.needRedelivery(t)
	topic, group := e.h.NewTopic(t), e.h.NewGroup(t)
	pub := e.pub(t)
	s1 := e.sub(t, group)
	provision(t, s1, topic)
	ch1, cancel := subscribe(t, s1, topic)
	m := relay.NewMessage([]byte("delayed across the end"))
	publish(t, pub, topic, m)
	got := e.next(t, ch1, "first delivery")
	const delay = 2 * time.Second
	native := e.caps.NativeDelay && (e.caps.MaxDelay == 0 || e.caps.MaxDelay >= delay)
	start := time.Now()
	if err := got.NackAfter(delay); err != nil {
		t.Fatalf("NackAfter: %v", err)
	}
	cancel()
	expectClosed(t, ch1, "cancelled subscription", 30*time.Second)

	s2 := e.sub(t, group)
	ch2, _ := subscribe(t, s2, topic)
	again := e.next(t, ch2, "redelivery after NackAfter and the end of the subscription")
	waited := time.Since(start)
	if again.ID != m.ID {
		t.Fatalf("redelivered %s, want %s", again.ID, m.ID)
	}
	if native && waited < delay-100*time.Millisecond {
		t.Errorf("native NackAfter(%v): redelivered %v after it, across the end of the subscription", delay, waited)
	}
	if err := again.Ack(); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if native {
		t.Logf("native delay held across the end of the subscription: redelivered after %v", waited.Round(time.Millisecond))
	} else {
		t.Logf("emulated delay: released when the subscription ended, redelivered after %v", waited.Round(time.Millisecond))
	}
}

// nackAfterWindow: with inflight=N, a message waiting out a long NackAfter
// holds no window slot: N further messages are delivered while it waits.
func nackAfterWindow(t *testing.T, e *env) {
	if e.h.NewSubscriberWith == nil {
		t.Skip("SKIP: the harness has neither NewSubscriberWith nor SubscriberURL, so no subscriber with a given in-flight window can be opened")
	}
	const n = 4
	topic, group := e.h.NewTopic(t), e.h.NewGroup(t)
	pub := e.pub(t)
	sub := e.h.NewSubscriberWith(t, group, SubscriberOptions{InFlight: n})
	t.Cleanup(func() { _ = sub.Close() })
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)

	waiting := relay.NewMessage([]byte("waits out a long delay"))
	waiting.Key = "one-key"
	publish(t, pub, topic, waiting)
	got := e.next(t, ch, "message to delay")
	if err := got.NackAfter(10 * time.Minute); err != nil {
		t.Fatalf("NackAfter: %v", err)
	}
	more := make([]*relay.Message, n)
	for i := range more {
		more[i] = relay.NewMessage([]byte(fmt.Sprintf("behind the delayed one %d", i)))
		more[i].Key = "one-key"
	}
	publish(t, pub, topic, more...)
	// Hold all n unsettled: they fit only if the delayed message holds no slot.
	want := ids(more)
	var held []*relay.Message
	for len(held) < n {
		m := e.next(t, ch, fmt.Sprintf("message %d of %d with inflight=%d and one message delayed", len(held)+1, n, n))
		if !want[m.ID] {
			t.Fatalf("unexpected message %s (the delayed one is %s)", m.ID, waiting.ID)
		}
		held = append(held, m)
	}
	for _, m := range held {
		if err := m.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	kind := "emulated"
	if e.caps.NativeDelay {
		kind = "native"
	}
	t.Logf("inflight=%d: %d messages held unsettled while one waited out a %s NackAfter(10m)", n, n, kind)
}

// inFlightBytes: with inflight=100 and inflight_bytes=150KiB, messages of
// 60 KiB are held two at a time: a third arrives only after one is acked.
func inFlightBytes(t *testing.T, e *env) {
	if e.h.NewSubscriberWith == nil {
		t.Skip("SKIP: the harness has neither NewSubscriberWith nor SubscriberURL, so no subscriber with a given window can be opened")
	}
	const size, bound, n = 60 << 10, 150 << 10, 5
	topic, group := e.h.NewTopic(t), e.h.NewGroup(t)
	pub := e.pub(t)
	sub := e.h.NewSubscriberWith(t, group, SubscriberOptions{InFlight: 100, InFlightBytes: bound})
	t.Cleanup(func() { _ = sub.Close() })
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage(bytes.Repeat([]byte{byte('a' + i)}, size))
		msgs[i].Key = "one-key"
	}
	publish(t, pub, topic, msgs...)
	want := ids(msgs)
	var held []*relay.Message
	for len(held) < 2 {
		m := e.next(t, ch, fmt.Sprintf("message %d of 60 KiB under a 150 KiB byte window", len(held)+1))
		if !want[m.ID] {
			t.Fatalf("unexpected message %s", m.ID)
		}
		held = append(held, m)
	}
	if m := none(ch, time.Second); m != nil {
		t.Fatalf("a third message of 60 KiB (%s) was delivered with 120 KiB of a 150 KiB window held", m.ID)
	}
	if err := held[0].Ack(); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	held = held[1:]
	got := 2
	for got < n {
		m := e.next(t, ch, fmt.Sprintf("message %d of %d after acks freed the byte window", got+1, n))
		got++
		held = append(held, m)
		if err := held[0].Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
		held = held[1:]
	}
	for _, m := range held {
		if err := m.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	t.Logf("inflight_bytes=%d: 60 KiB messages held two at a time; all %d delivered", bound, n)
}

// nilMessage: a batch holding a nil message is refused, by Publish and by
// PublishAsync, with an error matching relay.ErrNilMessage that names the
// message's index, never a panic, and nothing of the batch is sent.
func nilMessage(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	refused := map[string]bool{}
	batch := func(label string) []*relay.Message {
		a := relay.NewMessage([]byte(label + " before the nil message"))
		b := relay.NewMessage([]byte(label + " after the nil message"))
		refused[a.ID], refused[b.ID] = true, true
		return []*relay.Message{a, nil, b}
	}
	wantRefused := func(call string, err error) {
		t.Helper()
		if !errors.Is(err, relay.ErrNilMessage) || !strings.Contains(err.Error(), "index 1") {
			t.Errorf("%s with a nil message at index 1 = %v, want an error matching relay.ErrNilMessage naming index 1", call, err)
		}
	}
	wantRefused("Publish", noPanic(func() error { return pub.Publish(ctx, topic, batch("Publish")...) }))
	if ap, ok := pub.(relay.AsyncPublisher); ok {
		called := make(chan error, 1)
		err := noPanic(func() error {
			return ap.PublishAsync(ctx, topic, batch("PublishAsync"), func(err error) { called <- err })
		})
		wantRefused("PublishAsync", err)
		select {
		case err := <-called:
			t.Errorf("PublishAsync refused the batch and still called done(%v)", err)
		default:
		}
	}

	marker := relay.NewMessage([]byte("published after the refused batches"))
	publish(t, pub, topic, marker)
	for {
		got := e.next(t, ch, "the message published after the refused batches")
		_ = got.Ack()
		if got.ID == marker.ID {
			break
		}
		if refused[got.ID] {
			t.Errorf("message %s of a refused batch was delivered: %q", got.ID, got.Payload)
		} else {
			t.Errorf("unexpected message %s delivered: %q", got.ID, got.Payload)
		}
	}
	if extra := none(ch, 300*time.Millisecond); extra != nil {
		t.Errorf("message %s delivered after the marker (%q): part of a refused batch was sent", extra.ID, extra.Payload)
	}
}

// noPanic runs f and turns a panic into an error, so that a check reports
// it instead of crashing the test binary.
func noPanic(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return f()
}
