package driver

import (
	"context"
	"errors"
	"testing"

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
