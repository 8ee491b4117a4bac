package watermill

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/go-relay/relay"
)

// Subscriber is a Watermill message.Subscriber that receives through a
// relay.Subscriber, so Watermill's router and middleware consume from any
// relay backend. It receives for the one group the relay subscriber was
// opened for. Safe for concurrent use.
//
// It keeps Watermill's model: a subscription's channel delivers one
// message at a time, the next only after the previous one was acked or
// nacked (or settled through RelayMessage). The relay subscription below
// still reads ahead up to its in-flight window (the inflight= URL
// parameter); with several competing consumers of one group, a small
// window shares the messages more evenly.
type Subscriber struct {
	s    relay.Subscriber
	opts Options

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	subs    sync.WaitGroup

	once     sync.Once
	closeErr error
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber wraps s. The Subscriber owns s: its Close closes s.
func NewSubscriber(s relay.Subscriber, opts Options) *Subscriber {
	return &Subscriber{s: s, opts: opts.withDefaults(), closing: make(chan struct{})}
}

// Relay returns the wrapped relay subscriber.
func (s *Subscriber) Relay() relay.Subscriber { return s.s }

// Subscribe starts a relay subscription of topic and returns its
// Watermill channel. Each message carries a context derived from ctx
// (values included) that is done once the message is settled, its
// subscription ended or the Subscriber closed; RelayMessage reaches the
// relay message behind it.
//
// Ack becomes relay's Ack, Nack relay's Nack (or NackAfter, see
// Options.NackDelay); a settlement error (the subscription ended, say) is
// logged, since Watermill's Ack returns only a bool. When ctx is done or
// the Subscriber closes, the channel is closed once the relay
// subscription ended; unsettled messages are released to the group by
// relay. After Close, Subscribe returns an error wrapping relay.ErrClosed.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("relay/watermill: subscribe to %q: %w", topic, relay.ErrClosed)
	}
	s.subs.Add(1)
	s.mu.Unlock()

	sctx, cancel := context.WithCancel(ctx)
	in, err := s.s.Subscribe(sctx, topic)
	if err != nil {
		cancel()
		s.subs.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	go s.forward(sctx, cancel, topic, in, out)
	return out, nil
}

// forward hands the messages of in to out one at a time, each after the
// previous one was settled.
func (s *Subscriber) forward(ctx context.Context, cancel context.CancelFunc, topic string, in <-chan *relay.Message, out chan<- *message.Message) {
	defer s.subs.Done()
	defer close(out)
	defer func() {
		// End the relay subscription and wait for its channel to close:
		// then every unsettled message has been released to the group.
		cancel()
		for range in {
		}
	}()
	for {
		var m *relay.Message
		select {
		case m = <-in:
			if m == nil {
				return
			}
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		}
		wm := toWatermill(m, s.opts.KeyMetadata)
		wm.SetContext(withRelay(m))
		select {
		case out <- wm:
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		}
		select {
		case <-wm.Acked():
		case <-wm.Nacked():
		case <-m.Context().Done():
			// Settled through RelayMessage, or the subscription ended
			// (then in is closed and the loop ends).
		case <-s.closing:
			// A settlement made before Close still counts.
			s.settle(topic, m, wm)
			return
		}
		s.settle(topic, m, wm)
	}
}

// settle passes wm's Ack or Nack, if it has one, on to m.
func (s *Subscriber) settle(topic string, m *relay.Message, wm *message.Message) {
	var err error
	select {
	case <-wm.Acked():
		err = m.Ack()
	case <-wm.Nacked():
		if s.opts.NackDelay > 0 {
			err = m.NackAfter(s.opts.NackDelay)
		} else {
			err = m.Nack()
		}
	default:
		return
	}
	if err != nil && !errors.Is(err, relay.ErrAlreadySettled) {
		// ErrSubscriptionEnded: the message was released to the group
		// and will be delivered again.
		s.opts.Logger.Warn("relay/watermill: settling a message failed", "topic", topic, "id", m.ID, "error", err)
	}
}

// SubscribeInitialize implements message.SubscribeInitializer with
// relay.Provisioner: it creates topic and the subscriber's group so that
// messages published afterwards are kept for the group. It is a no-op on
// a relay subscriber that does not provision (mem://, whose first group
// gets what was published before it). Idempotent.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	p, ok := s.s.(relay.Provisioner)
	if !ok {
		return nil
	}
	err := p.Provision(context.Background(), topic)
	if errors.Is(err, relay.ErrNotSupported) {
		return nil
	}
	return err
}

// Close ends every subscription, closes their channels and then the relay
// subscriber, within relay's close timeout. Idempotent; later calls
// return the first result.
func (s *Subscriber) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.closing)
		s.mu.Unlock()
		// The subscriptions end first, each passing on the settlements
		// made before, then the relay subscriber closes.
		s.subs.Wait()
		s.closeErr = s.s.Close()
	})
	return s.closeErr
}
