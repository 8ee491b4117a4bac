package amqp

import (
	"context"
	"fmt"
	"strings"
	"sync"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// DirectReplyTo is RabbitMQ's direct reply-to pseudo-queue. A request
// published with reply_to set to it on a channel that consumes it (without
// acks) gets the broker's per-channel address, amq.rabbitmq.reply-to.…, in
// place of it; a reply published to that address on the default exchange
// reaches the channel without any queue.
const DirectReplyTo = "amq.rabbitmq.reply-to"

// isReplyAddress tells a topic that is a direct reply-to address: Publish
// sends it to the default exchange with the address as routing key.
func isReplyAddress(topic string) bool {
	return topic == DirectReplyTo || strings.HasPrefix(topic, DirectReplyTo+".")
}

// DirectReply opens a channel that consumes RabbitMQ's direct reply-to
// without acks and returns a relay.Publisher that publishes on that channel
// (in confirm mode, with this publisher's options), setting the reply_to
// property of every message to DirectReplyTo. Every message that reaches
// the channel's address is decoded as a delivery would be (the
// correlation_id property is the metadata relay.MetaCorrelationID) and
// passed to deliver, from one goroutine in arrival order. It is the hook
// of package reqreply (reqreply.DirectReplier).
//
// When the channel or the connection is lost, the next Publish opens a new
// channel (a new address): replies on their way to the old one are lost,
// and their requesters time out. Closing the returned Publisher closes the
// channel; deliver is not called once Close has returned. Close it before
// this Publisher. Safe for concurrent use.
func (p *Publisher) DirectReply(ctx context.Context, deliver func(*relay.Message)) (relay.Publisher, error) {
	if deliver == nil {
		return nil, fmt.Errorf("relay/amqp: DirectReply: deliver is nil")
	}
	dd := &directDriver{d: p.d, deliver: deliver, lock: make(chan struct{}, 1)}
	if _, err := dd.channel(ctx); err != nil {
		return nil, err
	}
	return driver.NewPublisher(dd, 0), nil
}

// directDriver is the driver of a DirectReply publisher: the pubDriver's
// send path on one channel of its own, which also consumes the replies.
type directDriver struct {
	d       *pubDriver
	deliver func(*relay.Message)

	lock      chan struct{} // guards pc and closed; waitable within a ctx
	pc        *pubChan
	closed    bool
	consumers sync.WaitGroup
	bg        sync.WaitGroup // closes of lost channels
}

// discard closes a lost channel in the background.
func (dd *directDriver) discard(pc *pubChan) {
	dd.bg.Add(1)
	go func() {
		defer dd.bg.Done()
		_ = pc.ch.Close()
		<-pc.done
	}()
}

// channel returns the usable reply channel, opening a new one (and its
// consumer) when there is none or it was lost.
func (dd *directDriver) channel(ctx context.Context) (*pubChan, error) {
	select {
	case dd.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-dd.lock }()
	if dd.closed {
		return nil, relay.ErrClosed
	}
	if dd.pc != nil && dd.pc.usable(dd.d.sup.current()) {
		return dd.pc, nil
	}
	if dd.pc != nil {
		dd.discard(dd.pc)
		dd.pc = nil
	}
	pc, err := openPubChan(ctx, dd.d.sup, true, dd.d.cfg.Mandatory)
	if err != nil {
		return nil, err
	}
	var deliveries <-chan amqp091.Delivery
	err = dd.d.sup.rpc(ctx, pc.conn, func() error {
		pc.lock()
		defer pc.unlock()
		var err error
		deliveries, err = pc.ch.Consume(DirectReplyTo, "", true, false, false, false, nil)
		return err
	})
	if err != nil {
		dd.discard(pc)
		return nil, fmt.Errorf("relay/amqp: consuming %s: %w", DirectReplyTo, err)
	}
	dd.consumers.Add(1)
	go func() {
		defer dd.consumers.Done()
		for dl := range deliveries {
			dd.deliver(decode(&dl, nil).msg)
		}
	}()
	dd.pc = pc
	return pc, nil
}

func (dd *directDriver) SendBatch(ctx context.Context, topic string, msgs []*relay.Message) error {
	return dd.d.sendBatch(ctx, topic, msgs, dd.channel, DirectReplyTo)
}

func (dd *directDriver) Capabilities() relay.Capabilities { return dd.d.caps }

func (dd *directDriver) ValidateTopic(topic string) error { return dd.d.ValidateTopic(topic) }

func (dd *directDriver) ValidateMessage(topic string, m *relay.Message) error {
	return dd.d.ValidateMessage(topic, m)
}

// Close closes the reply channel and waits for its consumer to finish.
func (dd *directDriver) Close() error {
	dd.lock <- struct{}{}
	dd.closed = true
	pc := dd.pc
	dd.pc = nil
	<-dd.lock
	if pc != nil {
		_ = pc.ch.Close() // fails only when it is closed already
		<-pc.done
	}
	dd.consumers.Wait()
	dd.bg.Wait()
	return nil
}
