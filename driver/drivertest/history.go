package drivertest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// history checks relay.HistoryReader where the subscriber implements it
// (driver.HistoryDriver): it reads every message published, byte-exact,
// with a position, without consuming it (the group receives each one
// afterwards, and each delivery's Position is the one the history
// named), and a window after the last message reads nothing.
func history(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	sub := e.sub(t, e.h.NewGroup(t))
	hr, ok := sub.(relay.HistoryReader)
	if !ok {
		t.Skip("the subscriber does not implement relay.HistoryReader (optional)")
	}
	provision(t, sub, topic)
	msgs := make([]*relay.Message, 5)
	for i := range msgs {
		msgs[i] = &relay.Message{ID: relay.NewID(), Key: "k", Payload: []byte{byte(i), 0, 0xff}}
	}
	before := time.Now().Add(-time.Minute)
	publish(t, e.pub(t), topic, msgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	read := map[string]relay.Stored{}
	err := hr.ReadHistory(ctx, topic, relay.Window{}, func(s relay.Stored) error {
		c := s
		c.Msg = s.Msg.Copy()
		read[s.Msg.ID] = c
		return nil
	})
	if errors.Is(err, relay.ErrNotSupported) {
		t.Skipf("no history: %v", err)
	}
	if err != nil {
		t.Fatalf("ReadHistory: %v", err)
	}
	if len(read) != len(msgs) {
		t.Fatalf("ReadHistory read %d messages, want %d", len(read), len(msgs))
	}
	for _, m := range msgs {
		s, ok := read[m.ID]
		switch {
		case !ok:
			t.Fatalf("ReadHistory did not read %s", m.ID)
		case s.Msg.Key != m.Key || !bytes.Equal(s.Msg.Payload, m.Payload):
			t.Fatalf("ReadHistory read %s as key %q payload %x, want %q %x", m.ID, s.Msg.Key, s.Msg.Payload, m.Key, m.Payload)
		case s.Position.IsZero():
			t.Fatalf("ReadHistory read %s without a position", m.ID)
		case s.Time.Before(before) || s.Time.After(time.Now().Add(time.Minute)):
			t.Fatalf("ReadHistory read %s stored at %v", m.ID, s.Time)
		}
	}
	n := 0
	err = hr.ReadHistory(ctx, topic, relay.Window{Since: time.Now().Add(time.Minute)}, func(relay.Stored) error { n++; return nil })
	if err != nil || n != 0 {
		t.Fatalf("ReadHistory after the last message read %d, %v; want none", n, err)
	}
	ch, _ := subscribe(t, sub, topic)
	for range msgs {
		m := e.next(t, ch, "a message read as history")
		s, ok := read[m.ID]
		if !ok {
			t.Fatalf("delivered %s, which the history did not read", m.ID)
		}
		if m.Position() != s.Position {
			t.Fatalf("%s delivered at position %q, read in the history at %q", m.ID, m.Position(), s.Position)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
}
