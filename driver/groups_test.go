package driver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// groupPub is a fakePub whose broker answers CheckGroups.
type groupPub struct {
	fakePub
	topics []string
	answer error
}

func (g *groupPub) CheckGroups(_ context.Context, topic string) error {
	g.topics = append(g.topics, topic)
	return g.answer
}

// Publisher.CheckGroups passes the driver's answer through, checks the
// topic first, says ErrNotSupported for a driver without GroupCheckDriver,
// and ErrClosed after Close.
func TestPublisherCheckGroups(t *testing.T) {
	ctx := context.Background()
	noGroup := &relay.NoGroupError{Backend: "fake", Topic: "orders", Detail: "nothing there"}
	g := &groupPub{answer: noGroup}
	p := NewPublisher(g, 0)
	if err := p.CheckGroups(ctx, "orders"); !errors.Is(err, relay.ErrNoGroup) || err.Error() != noGroup.Error() {
		t.Errorf("CheckGroups = %v, want the driver's %v", err, noGroup)
	}
	if err := p.CheckGroups(ctx, ""); !errors.Is(err, relay.ErrInvalidTopic) || len(g.topics) != 1 {
		t.Errorf("CheckGroups of an empty topic = %v (driver asked %d times), want ErrInvalidTopic before asking", err, len(g.topics))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckGroups(ctx, "orders"); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("CheckGroups after Close = %v, want ErrClosed", err)
	}

	plain := NewPublisher(&fakePub{}, 0)
	defer plain.Close()
	if err := plain.CheckGroups(ctx, "orders"); !errors.Is(err, relay.ErrNotSupported) {
		t.Errorf("CheckGroups without GroupCheckDriver = %v, want ErrNotSupported", err)
	}
	want := `relay/fake: topic "orders" has no group (nothing there): a message published to it now would be delivered to no one; ` +
		"provision a group first with `relay provision URL orders --group GROUP` (or Subscriber.Provision)"
	if noGroup.Error() != want {
		t.Errorf("NoGroupError text:\n%s\nwant\n%s", noGroup.Error(), want)
	}
}

// groupSendPub is a fakePub that can send to one group.
type groupSendPub struct {
	fakePub
	groups []string
	sizes  []int
}

func (g *groupSendPub) SendBatchToGroup(_ context.Context, _, group string, msgs []*relay.Message) error {
	g.groups = append(g.groups, group)
	g.sizes = append(g.sizes, len(msgs))
	return nil
}

// Publisher.PublishToGroup sends through the driver's SendBatchToGroup in
// batches of MaxBatch, refuses what it cannot do (no GroupSendDriver, a
// message due later, no group) before sending anything, and ErrClosed
// after Close.
func TestPublisherPublishToGroup(t *testing.T) {
	ctx := context.Background()
	g := &groupSendPub{fakePub: fakePub{maxB: 2}}
	p := NewPublisher(g, 0)
	if err := p.PublishToGroup(ctx, "orders", "billing", msgs(5)...); err != nil {
		t.Fatal(err)
	}
	if len(g.sizes) != 3 || g.sizes[0] != 2 || g.sizes[2] != 1 || g.groups[0] != "billing" || len(g.batches) != 0 {
		t.Errorf("sent batches %v to groups %v (and %d plain batches), want 2, 2, 1 to billing", g.sizes, g.groups, len(g.batches))
	}
	later := relay.NewMessage([]byte("x")).DeliverAfter(time.Hour)
	if err := p.PublishToGroup(ctx, "orders", "billing", later); !errors.Is(err, relay.ErrNotSupported) || len(g.sizes) != 3 {
		t.Errorf("PublishToGroup of a message due later = %v (%d sends), want ErrNotSupported and nothing sent", err, len(g.sizes))
	}
	if err := p.PublishToGroup(ctx, "orders", "", msgs(1)...); err == nil || len(g.sizes) != 3 {
		t.Errorf("PublishToGroup to no group = %v, want an error and nothing sent", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.PublishToGroup(ctx, "orders", "billing", msgs(1)...); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("PublishToGroup after Close = %v, want ErrClosed", err)
	}
	plain := NewPublisher(&fakePub{}, 0)
	defer plain.Close()
	if err := plain.PublishToGroup(ctx, "orders", "billing", msgs(1)...); !errors.Is(err, relay.ErrNotSupported) {
		t.Errorf("PublishToGroup without GroupSendDriver = %v, want ErrNotSupported", err)
	}
}
