package driver

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/go-relay/relay"
)

// DefaultAsyncInFlight is how many PublishAsync calls a Publisher keeps
// in flight at once; the next call blocks until one completes. Each holds
// its messages, so this bounds a pipelining producer's memory to that
// many batches. It is set so that with batches of 100 a native pipelining
// client's own buffer bound (franz-go's 10,000 buffered records) is
// reached first, so that the calling goroutine waits on the client, not
// on slots (BenchmarkRatio's publish/async rows of adapters/kafka compare
// it with franz-go's own Produce loop).
const DefaultAsyncInFlight = 256

// errNoDone is PublishAsync's answer to a nil done func.
var errNoDone = errors.New("relay: PublishAsync needs a done func to report the outcome to")

// PublishAsync implements relay.AsyncPublisher. It takes one of the
// DefaultAsyncInFlight slots (blocking while none is free, within ctx),
// validates msgs as Publish does, and sends them through the driver's
// AsyncSender when it has one and the call fits one batch, otherwise on a
// goroutine through the same path as Publish (Retryable failures sent
// again until ctx ends, as Publish does). Close waits for the calls in
// flight and cancels them after its grace period like Publish calls.
func (p *Publisher) PublishAsync(ctx context.Context, topic string, msgs []*relay.Message, done func(error)) error {
	if done == nil {
		return errNoDone
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.kill.Done():
		return relay.ErrClosed
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return relay.ErrClosed
	}
	p.inflight.Add(1)
	p.mu.Unlock()
	if err := p.validate(topic, msgs); err != nil {
		<-p.slots
		p.inflight.Done()
		return err
	}
	if p.stamp {
		msgs = stampDue(msgs)
	}

	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.kill, cancel)
	finish := func(err error) {
		stop()
		cancel()
		<-p.slots
		done(err)
		p.inflight.Done()
	}
	if len(msgs) == 0 {
		finish(nil)
		return nil
	}
	if as, ok := p.d.(AsyncSender); ok {
		if _, whole := p.d.(WholeSender); !whole && (p.caps.MaxBatch <= 0 || len(msgs) <= p.caps.MaxBatch) {
			as.SendBatchAsync(ctx, topic, msgs, onceFunc(finish))
			return nil
		}
	}
	go func() { finish(p.send(ctx, topic, msgs)) }()
	return nil
}

// onceFunc returns f guarded so that a driver that calls done twice by
// mistake cannot release a slot twice: calls after the first do nothing.
func onceFunc(f func(error)) func(error) {
	var called atomic.Bool
	return func(err error) {
		if called.CompareAndSwap(false, true) {
			f(err)
		}
	}
}
