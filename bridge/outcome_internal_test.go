package bridge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// A message that a fenced exactly-once session could not forward is given
// back (an error, so the source redelivers it to the next session): never
// poisoned, even with after_deliveries 1, and not counted as failed.
func TestFencedMessageIsGivenBackNotPoisoned(t *testing.T) {
	b, err := New(Config{Routes: []Route{{
		Name:   "r",
		From:   Source{URL: "mem://x", Topic: "in", Group: "g"},
		To:     Destination{URL: "mem://y", Topic: "out"},
		Poison: &Poison{Topic: "p", AfterDeliveries: 1},
	}}}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r := b.routes[0]
	poisonPub := newRec(nil)
	mws, err := r.chain(poisonPub)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	h := router.Chain(mws...)(func(context.Context, *relay.Message) ([]*relay.Message, error) {
		calls++
		return nil, fmt.Errorf("committing the transaction: %w", relay.ErrTakenOver)
	})
	m := relay.NewMessage([]byte("x"))
	_, err = h(router.WithHandlerInfo(context.Background(), "r", "in"), m)
	if err == nil {
		t.Fatal("the chain returned nil for a fenced forward: the source would ack a message that was not forwarded")
	}
	if calls != 1 {
		t.Errorf("forward tried %d times; a fenced session must not retry", calls)
	}
	if len(poisonPub.calls) != 0 {
		t.Errorf("poison topic got %v; a fenced message must be given back, not poisoned", poisonPub.calls)
	}
	if got := count(r.m.poisoned); got != 0 {
		t.Errorf("poisoned = %d, want 0", got)
	}
	if got := count(r.m.failed); got != 0 {
		t.Errorf("failed = %d, want 0 (given back to the next session)", got)
	}
}

// last_forwarded names the last message of a batch whose copy the
// destination confirmed: not the batch's last message when that one's
// copy failed.
func TestLastForwardedSkipsFailedCopies(t *testing.T) {
	b, err := New(Config{Routes: []Route{{
		Name: "r",
		From: Source{URL: "mem://x", Topic: "in", Group: "g"},
		To:   Destination{URL: "mem://y", Topic: "out"},
	}}}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r := b.routes[0]
	srcs := []*relay.Message{relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b")), relay.NewMessage([]byte("c")), relay.NewMessage([]byte("d"))}
	failing := map[string]bool{srcs[1].ID: true, srcs[3].ID: true}
	pub := newRec(func(id string, _ int) bool { return failing[id] })
	f := &forwarder{r: r, pub: pub}
	if err := f.publishBatch(context.Background(), srcs, nil); err == nil {
		t.Fatal("publishBatch hid the failed copies")
	}
	if got := r.cut.lastForwarded().id; got != srcs[2].ID {
		t.Errorf("last forwarded %s, want %s (the last confirmed; %s failed)", got, srcs[2].ID, srcs[3].ID)
	}
	if got := count(r.m.forwarded); got != 2 {
		t.Errorf("forwarded = %d, want 2", got)
	}
}
