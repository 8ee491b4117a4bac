package memory

import (
	"context"
	"slices"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

type receiver struct {
	b        *broker
	g        *group
	taken    []*entry          // reused by every Receive
	out      []driver.Received // returned by Receive, reused by the next
	payloads driver.Arena
}

// Receive copies up to max ready entries into messages; the messages of
// one call share one allocation, and small payloads share an arena.
func (r *receiver) Receive(ctx context.Context, max int) ([]driver.Received, error) {
	for {
		entries, wait := r.b.take(r.g, max, r.taken[:0])
		r.taken = entries
		if len(entries) > 0 {
			clear(r.out)
			out := slices.Grow(r.out[:0], len(entries))[:len(entries)]
			r.out = out
			msgs := make([]relay.Message, len(entries))
			for i, e := range entries {
				m := &msgs[i]
				m.ID, m.Key, m.Metadata, m.Payload = e.id, e.key, e.md.Clone(), r.payloads.Bytes(e.payload)
				out[i] = driver.Received{Msg: m, Attempt: e.deliveries, Handle: e}
			}
			clear(entries)
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait:
		}
	}
}

func (r *receiver) Settle(_ context.Context, batch []driver.Settle) error {
	acks := 0
	for _, s := range batch {
		if s.Ack {
			acks++
		} else {
			r.b.requeue(r.g, s.Handle.(*entry), s.Delay)
		}
	}
	if acks > 0 {
		r.b.acked(r.g, acks)
	}
	return nil
}

func (r *receiver) Release(_ context.Context, handles []any) error {
	for _, h := range handles {
		r.b.requeue(r.g, h.(*entry), 0)
	}
	return nil
}

func (r *receiver) Close(context.Context) error { return nil }
