package driver

import (
	"context"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/deliveryhook"
)

// Settlement is how a delivered message was settled: Ack, or a Nack with
// an optional redelivery delay.
type Settlement = deliveryhook.Settlement

// Settler receives the settlements of delivered messages; see
// DeliveryParams. It is the allocation-free alternative to a Settle func.
type Settler = deliveryhook.Settler

// DeliveryParams carries what is known about a received message. See
// Deliver.
type DeliveryParams struct {
	Topic   string
	Attempt int
	// Ctx is the parent of the message's context, normally the
	// subscription's.
	Ctx context.Context
	// Settle, or else Settler with Token, is called at most once per
	// successful settlement, on the goroutine that calls Ack/Nack. It must
	// not block on the broker: it records the settlement and returns. An
	// error (such as relay.ErrSubscriptionEnded) is returned to the caller
	// and the message stays unsettled.
	Settle  func(Settlement) error
	Settler Settler
	Token   uint64
	// Position is where the message is kept in its source
	// (relay.Message.Position); zero when the backend has none.
	Position relay.Position
}

// Deliver attaches delivery state to m and returns it, so that m's Topic,
// Attempt, Context, Ack and Nack work. NewSubscriber calls it for every
// received message; an adapter built on this package never needs to, but
// code that delivers messages on its own (test fakes, a Subscriber written
// without this package) does. The message's context is a child of p.Ctx,
// cancelled after the first successful settlement; it is created only when
// Context is first called.
func Deliver(m *relay.Message, p DeliveryParams) *relay.Message {
	deliveryhook.Attach(m, deliveryhook.Params{
		Topic: p.Topic, Attempt: p.Attempt, Ctx: p.Ctx,
		Settle: p.Settle, Settler: p.Settler, Token: p.Token, Pos: positionOf(p.Position),
	})
	return m
}

// positionOf is the representation of p that deliveryhook carries.
func positionOf(p relay.Position) deliveryhook.Position {
	var hp deliveryhook.Position
	switch part, ok := p.Partition(); {
	case ok:
		hp = deliveryhook.Position{Kind: deliveryhook.PosPartition, Partition: part, Offset: p.Offset()}
	case p.Entry() != "":
		hp = deliveryhook.Position{Kind: deliveryhook.PosEntry, Entry: p.Entry()}
	case !p.IsZero():
		hp = deliveryhook.Position{Kind: deliveryhook.PosOffset, Offset: p.Offset()}
	}
	return hp
}
