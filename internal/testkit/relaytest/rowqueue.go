package relaytest

import (
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// The checks of the table-backed queues (postgres://, sqlite://), which
// share their semantics (internal/rowqueue).

// LeaseExtended checks lease extension: slow holds a message for five
// leases while competitor, a member of the same group that polls often,
// subscribes too; the shared layer extends the lease, so the competitor
// never gets the message. pub publishes to topic, of which neither has a
// subscription yet.
func LeaseExtended(t *testing.T, pub relay.Publisher, slow, competitor relay.Subscriber, topic string, lease time.Duration) {
	t.Helper()
	ch, _ := Subscribe(t, slow, topic)
	Publish(t, pub, topic, relay.NewMessage([]byte("slow work")))
	held := Next(t, ch, "the message to hold")
	cch, cancel := Subscribe(t, competitor, topic)
	if stolen := Quiet(cch, 5*lease); stolen != nil {
		t.Fatalf("the competitor got %q (attempt %d) while its lease was being extended", stolen.ID, stolen.Attempt())
	}
	if err := held.Ack(); err != nil {
		t.Fatal(err)
	}
	cancel()
	for range cch {
	}
}

// OutboxCase is a transactional outbox under test.
type OutboxCase struct {
	// Write runs one transaction that inserts a business row keyed by
	// m.Key and publishes m to topic through the outbox, and commits it
	// or rolls it back.
	Write func(t *testing.T, topic string, m *relay.Message, commit bool)
	// MessageRows counts the message rows the database keeps for relay
	// ID id.
	MessageRows func(t *testing.T, id string) int
	// BusinessRows counts the business rows of key.
	BusinessRows func(t *testing.T, key string) int
}

// Outbox checks c with sub, a subscriber provisioned for topic: a
// message published in a rolled-back transaction gets an ID, leaves no
// row and is never delivered; one published in a committed transaction
// is delivered with its ID, key, metadata and payload; the business row
// exists iff committed.
func Outbox(t *testing.T, sub relay.Subscriber, topic string, c OutboxCase) {
	t.Helper()
	ch, _ := Subscribe(t, sub, topic)
	rolledBack := &relay.Message{Key: "order-1", Payload: []byte("rolled back")}
	c.Write(t, topic, rolledBack, false)
	if rolledBack.ID == "" {
		t.Fatal("the outbox did not assign an ID")
	}
	committed := &relay.Message{Key: "order-2", Metadata: relay.Metadata{"type": "order.placed"}, Payload: []byte{0, 1, 2, 0xff}}
	c.Write(t, topic, committed, true)
	got := Next(t, ch, "the committed message")
	if got.ID != committed.ID || got.Key != "order-2" || got.Metadata["type"] != "order.placed" || string(got.Payload) != string(committed.Payload) {
		t.Fatalf("got %q key %q md %v payload %x, want the committed message %q", got.ID, got.Key, got.Metadata, got.Payload, committed.ID)
	}
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
	if n := c.MessageRows(t, rolledBack.ID); n != 0 {
		t.Fatalf("%d message rows of the rolled-back message", n)
	}
	for key, want := range map[string]int{rolledBack.Key: 0, committed.Key: 1} {
		if n := c.BusinessRows(t, key); n != want {
			t.Fatalf("order %s: %d rows, want %d", key, n, want)
		}
	}
}
