package amqp

import (
	"sync"
	"sync/atomic"
)

// attemptMemo maps a message (queue and ID) to the attempt of its next
// delivery, for requeues the broker does not count. It holds at most
// memoMax entries, dropping the oldest: a message requeued by this process
// and then taken and settled by another one is never forgotten otherwise.
type attemptMemo struct {
	size atomic.Int64 // len(next), read without mu
	mu   sync.Mutex
	next map[memoKey]int
	fifo []memoKey // insertion order; may hold keys dropped since
}

type memoKey struct{ queue, id string }

const memoMax = 1 << 16

func (a *attemptMemo) get(k memoKey) int {
	if a.size.Load() == 0 {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.next[k]
}

func (a *attemptMemo) put(k memoKey, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer func() { a.size.Store(int64(len(a.next))) }()
	if a.next == nil {
		a.next = map[memoKey]int{}
	}
	if _, ok := a.next[k]; !ok {
		a.fifo = append(a.fifo, k)
	}
	a.next[k] = n
	for len(a.next) > memoMax {
		delete(a.next, a.fifo[0])
		a.fifo = a.fifo[1:]
	}
	if len(a.fifo) > 2*len(a.next)+64 {
		kept := make([]memoKey, 0, len(a.next))
		seen := make(map[memoKey]bool, len(a.next))
		for _, k := range a.fifo {
			if _, ok := a.next[k]; ok && !seen[k] {
				seen[k] = true
				kept = append(kept, k)
			}
		}
		a.fifo = kept
	}
}

func (a *attemptMemo) drop(k memoKey) {
	if a.size.Load() == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.next, k)
	a.size.Store(int64(len(a.next)))
}
