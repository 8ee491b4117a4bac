package relay

// The delivery state machine of a received message: attach gives a
// message its delivery state (topic, attempt, the settler of its
// subscription), and settle moves it from open to acked or nacked exactly
// once, passing the first settlement to the subscription and cancelling
// the message's context. A repeat of the same settlement is a no-op; the
// opposite one is ErrAlreadySettled.

import (
	"context"
	"sync"

	"github.com/go-relay/relay/internal/deliveryhook"
)

// settlement is how a delivered message was settled.
type settlement = deliveryhook.Settlement

func init() {
	deliveryhook.Attach = attach
	deliveryhook.AttachBatch = attachBatch
}

// attach is driver.Deliver's way in: it sets m's delivery state. The
// message's context is a child of p.Ctx, cancelled after the first
// successful settlement; it is created only when Context is first called,
// so delivery costs no context when nobody asks for one.
func attach(v any, p deliveryhook.Params) {
	m := v.(*Message)
	both := &struct {
		d   delivery
		src deliverySource
	}{}
	both.src.init(p)
	both.d.src, both.d.attempt, both.d.token, both.d.pos = &both.src, p.Attempt, p.Token, p.Pos
	m.d = &both.d
}

// attachBatch is attach for a batch (the shared layer's receive path):
// the messages share p (its Attempt and Token aside) and one allocation
// of delivery states, which stays alive while any message of the batch is
// referenced (a batch is at most a subscription's in-flight window).
func attachBatch(v any, p deliveryhook.Params, each func(int) (attempt int, token uint64, pos deliveryhook.Position)) {
	ms := v.([]*Message)
	src := &deliverySource{}
	src.init(p)
	ds := make([]delivery, len(ms))
	for i, m := range ms {
		d := &ds[i]
		d.src = src
		d.attempt, d.token, d.pos = each(i)
		m.d = d
	}
}

const (
	stateOpen = iota
	stateAcked
	stateNacked
)

// deliverySource is what the messages of one delivered batch share.
type deliverySource struct {
	topic   string
	parent  context.Context
	fn      func(settlement) error
	settler deliveryhook.Settler
}

func (s *deliverySource) init(p deliveryhook.Params) {
	s.topic, s.parent, s.fn, s.settler = p.Topic, p.Ctx, p.Settle, p.Settler
	if s.parent == nil {
		s.parent = context.Background()
	}
}

type delivery struct {
	src     *deliverySource
	attempt int
	token   uint64
	pos     deliveryhook.Position

	mu     sync.Mutex
	state  int
	ctx    context.Context // created lazily by context()
	cancel context.CancelFunc
}

func (d *delivery) context() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil {
		d.ctx, d.cancel = context.WithCancel(d.src.parent)
		if d.state != stateOpen {
			d.cancel()
		}
	}
	return d.ctx
}

func (d *delivery) settle(s settlement) error {
	want := stateNacked
	if s.Ack {
		want = stateAcked
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.state {
	case want:
		return nil
	case stateOpen:
	default:
		return ErrAlreadySettled
	}
	var err error
	switch {
	case d.src.settler != nil:
		err = d.src.settler.Settle(d.token, s)
	case d.src.fn != nil:
		err = d.src.fn(s)
	}
	if err != nil {
		return err
	}
	d.state = want
	if d.cancel != nil {
		d.cancel()
	}
	return nil
}
