package driver

import (
	"sync"
	"sync/atomic"
)

// AttemptMemo remembers attempts that a broker does not count, for a
// Receiver whose Received.Attempt would otherwise start again at 1 (or
// fall back): a Kafka record whose partition moved to another
// subscription of the process, a message requeued to a RabbitMQ classic
// queue, a NATS delivery the server rolled back. The receiver remembers
// the attempt as the message leaves it (nacked, released, revoked) and
// recalls it when the message comes back, so that Attempt grows across
// those redeliveries within the process; another process starts again
// from what the broker tells it.
//
// K identifies a redelivery of one message: a stream sequence, a queue
// and message ID, a partition and offset. The memo holds at most Max
// entries (DefaultAttemptMemoMax when Max is 0), forgetting the oldest
// first, so a message that is remembered here and then settled elsewhere
// costs only its entry until it is pushed out. The zero value is ready to
// use; it is safe for concurrent use, and Recall and Take on an empty
// memo take no lock.
type AttemptMemo[K comparable] struct {
	// Max bounds the entries; 0 means DefaultAttemptMemoMax. Set it
	// before the first use.
	Max int

	size  atomic.Int64 // len(m), read without mu
	mu    sync.Mutex
	m     map[K]int
	order []K // insertion order, for eviction; may hold keys forgotten since
}

// DefaultAttemptMemoMax is the bound of an AttemptMemo whose Max is 0.
const DefaultAttemptMemoMax = 1 << 16

// Remember records n as the attempt of k, replacing what was remembered;
// n <= 0 records nothing.
func (a *AttemptMemo[K]) Remember(k K, n int) {
	if n <= 0 {
		return
	}
	limit := a.Max
	if limit <= 0 {
		limit = DefaultAttemptMemoMax
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[K]int)
	}
	if _, ok := a.m[k]; !ok {
		a.order = append(a.order, k)
	}
	a.m[k] = n
	for len(a.m) > limit && len(a.order) > 0 {
		delete(a.m, a.order[0])
		a.order = a.order[1:]
	}
	if len(a.order) > 2*len(a.m)+64 {
		a.compactLocked()
	}
	a.size.Store(int64(len(a.m)))
}

// compactLocked drops the keys of order that were forgotten, keeping the
// first occurrence of each live one.
func (a *AttemptMemo[K]) compactLocked() {
	kept := make([]K, 0, len(a.m))
	seen := make(map[K]bool, len(a.m))
	for _, k := range a.order {
		if _, ok := a.m[k]; ok && !seen[k] {
			seen[k] = true
			kept = append(kept, k)
		}
	}
	a.order = kept
}

// Recall returns the attempt remembered for k, 0 when none, and keeps it.
func (a *AttemptMemo[K]) Recall(k K) int {
	if a.size.Load() == 0 {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[k]
}

// Take returns the attempt remembered for k, 0 when none, and forgets it.
func (a *AttemptMemo[K]) Take(k K) int {
	if a.size.Load() == 0 {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.m[k]
	if ok {
		a.forgetLocked(k)
	}
	return n
}

// Forget drops what was remembered for k.
func (a *AttemptMemo[K]) Forget(k K) {
	if a.size.Load() == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forgetLocked(k)
}

func (a *AttemptMemo[K]) forgetLocked(k K) {
	delete(a.m, k)
	if len(a.m) == 0 {
		a.order = a.order[:0]
	}
	a.size.Store(int64(len(a.m)))
}

// Len is the number of entries held.
func (a *AttemptMemo[K]) Len() int { return int(a.size.Load()) }
