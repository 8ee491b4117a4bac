package driver

import (
	"context"
	"sync"
)

// Lookups remembers, per key, what a broker call found: a queue's URL, a
// topic's ARN or stream, or that a topic exists. An adapter looks each key
// up once instead of on every publish:
//
//   - concurrent Gets of one key share one call;
//   - a failed call is not remembered: the next Get calls again, and a Get
//     that waited for it calls again itself, within its own ctx (the failure
//     may have been the other caller's ctx ending);
//   - Forget drops a key whose value the broker no longer has.
//
// The zero value is ready to use. Safe for concurrent use.
type Lookups[V any] struct {
	mu sync.Mutex
	m  map[string]*lookup[V]
}

// lookup is one call for a key; val and err are set before done closes.
type lookup[V any] struct {
	done chan struct{}
	val  V
	err  error
}

// Get returns key's value: the remembered one, or what find returns,
// called with ctx when no call for key has succeeded and none is running;
// otherwise it waits for the running call. It blocks while find runs, and
// returns ctx's error when ctx ends first.
func (l *Lookups[V]) Get(ctx context.Context, key string, find func(context.Context) (V, error)) (V, error) {
	for {
		l.mu.Lock()
		e := l.m[key]
		if e == nil {
			if l.m == nil {
				l.m = make(map[string]*lookup[V])
			}
			e = &lookup[V]{done: make(chan struct{})}
			l.m[key] = e
			l.mu.Unlock()
			e.val, e.err = find(ctx)
			if e.err != nil {
				l.drop(key, e)
			}
			close(e.done)
			return e.val, e.err
		}
		l.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
		if e.err == nil {
			return e.val, nil
		}
		// The call waited for failed and is dropped: call again.
	}
}

// Cached returns key's value when a call for it has succeeded (and it was
// not forgotten since), without calling anything. It does not block.
func (l *Lookups[V]) Cached(key string) (V, bool) {
	l.mu.Lock()
	e := l.m[key]
	l.mu.Unlock()
	if e != nil {
		select {
		case <-e.done:
			if e.err == nil {
				return e.val, true
			}
		default:
		}
	}
	var zero V
	return zero, false
}

// Forget drops key, so that the next Get calls find again. A call running
// now still answers the Gets waiting for it, but its value is not kept.
func (l *Lookups[V]) Forget(key string) {
	l.mu.Lock()
	delete(l.m, key)
	l.mu.Unlock()
}

// drop forgets key if e is still its call.
func (l *Lookups[V]) drop(key string, e *lookup[V]) {
	l.mu.Lock()
	if l.m[key] == e {
		delete(l.m, key)
	}
	l.mu.Unlock()
}
