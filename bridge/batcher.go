package bridge

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-relay/relay"
)

// batcher publishes the copies that a route's concurrent handlers hand it
// in as few Publish calls as it can (group commit): every flusher takes
// all the copies waiting, up to max, and publishes them in one call; under
// load calls fill up, when idle a copy goes out alone at once. Each handler
// still gets the result for its own message, so it acks or fails its
// source message individually.
//
// Messages with the same Key are never in flight together (the router
// handles a Key in one lane, one message at a time), so batching keeps
// per-Key order.
type batcher struct {
	pub     relay.Publisher
	topic   string
	max     int
	timeout time.Duration

	reqs chan *pubReq
	stop chan struct{}
	wg   sync.WaitGroup
}

type pubReq struct {
	ctx  context.Context
	m    *relay.Message
	done chan error // buffered: the flusher never blocks on it
}

// newBatcher starts flushers goroutines; call close when no publish is
// in progress any more.
func newBatcher(pub relay.Publisher, topic string, max, flushers int, timeout time.Duration) *batcher {
	b := &batcher{pub: pub, topic: topic, max: max, timeout: timeout, reqs: make(chan *pubReq), stop: make(chan struct{})}
	b.wg.Add(flushers)
	for range flushers {
		go b.flusher()
	}
	return b
}

// publish sends m and returns the destination's answer for it. It blocks
// until the message was published or failed, or ctx is done (then the
// message may still be published: at-least-once).
func (b *batcher) publish(ctx context.Context, m *relay.Message) error {
	r := &pubReq{ctx: ctx, m: m, done: make(chan error, 1)}
	select {
	case b.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.stop:
		return relay.ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
}

func (b *batcher) flusher() {
	defer b.wg.Done()
	batch := make([]*pubReq, 0, b.max)
	for {
		batch = batch[:0]
		select {
		case r := <-b.reqs:
			batch = append(batch, r)
		case <-b.stop:
			return
		}
	fill:
		for len(batch) < b.max {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		b.send(batch)
	}
}

// send publishes batch and answers every request in it.
func (b *batcher) send(batch []*pubReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	msgs := make([]*relay.Message, len(live))
	for i, r := range live {
		msgs[i] = r.m
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	stop := context.AfterFunc(live[0].ctx, cancel) // router hard stop
	defer stop()
	err := b.pub.Publish(ctx, b.topic, msgs...)
	var pe *relay.PublishError
	switch {
	case err == nil:
		for _, r := range live {
			r.done <- nil
		}
	case errors.As(err, &pe):
		failed := make(map[string]error, len(pe.Failed))
		for _, f := range pe.Failed {
			failed[f.ID] = f.Err
		}
		for _, r := range live {
			if ferr, ok := failed[r.m.ID]; ok {
				r.done <- &relay.PublishError{Failed: []relay.MessageFailure{{ID: r.m.ID, Err: ferr}}}
			} else {
				r.done <- nil
			}
		}
	case rejected(err) && len(live) > 1:
		// The adapter refused the whole call for one message's sake
		// (limits are checked before anything is sent): find it.
		for _, r := range live {
			ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
			r.done <- b.pub.Publish(ctx, b.topic, r.m)
			cancel()
		}
	default:
		for _, r := range live {
			r.done <- err
		}
	}
}
