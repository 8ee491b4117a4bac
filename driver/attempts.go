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
// from what the broker tells it. A receiver whose broker counts nothing
// (an SQS emulator) counts every delivery with Count instead.
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
	m     map[K]memoEntry
	order []memoSlot[K] // insertion order, for eviction; may hold stale slots
	gen   uint64        // stamps each insertion
}

// memoEntry is an attempt and the stamp of the insertion that made it.
type memoEntry struct {
	n   int
	gen uint64
}

// memoSlot is a place in the eviction order. It is stale when its key was
// forgotten since, or forgotten and remembered again (a new stamp): a
// stale slot evicts nothing.
type memoSlot[K comparable] struct {
	k   K
	gen uint64
}

// DefaultAttemptMemoMax is the bound of an AttemptMemo whose Max is 0.
const DefaultAttemptMemoMax = 1 << 16

// Remember records n as the attempt of k, replacing what was remembered;
// n <= 0 records nothing.
func (a *AttemptMemo[K]) Remember(k K, n int) {
	if n <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rememberLocked(k, n)
}

// Count records one more delivery of k and returns its attempt: one more
// than what was remembered, 1 when nothing was. It serves a receiver whose
// broker counts no deliveries at all (or, like an emulator, may not): it
// counts each delivery as it arrives and forgets the message once it is
// acknowledged. A counted key becomes the newest in the eviction order,
// so a message that keeps coming back is the last to be forgotten.
func (a *AttemptMemo[K]) Count(k K) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.m[k].n + 1
	delete(a.m, k) // its slot in the order goes stale: it is inserted anew
	a.rememberLocked(k, n)
	return n
}

func (a *AttemptMemo[K]) rememberLocked(k K, n int) {
	limit := a.Max
	if limit <= 0 {
		limit = DefaultAttemptMemoMax
	}
	if a.m == nil {
		a.m = make(map[K]memoEntry)
	}
	if e, ok := a.m[k]; ok {
		e.n = n
		a.m[k] = e
	} else {
		a.gen++
		a.m[k] = memoEntry{n: n, gen: a.gen}
		a.order = append(a.order, memoSlot[K]{k: k, gen: a.gen})
	}
	for len(a.m) > limit && len(a.order) > 0 {
		if a.live(a.order[0]) {
			delete(a.m, a.order[0].k)
		}
		a.order = a.order[1:]
	}
	if len(a.order) > 2*len(a.m)+64 {
		a.compactLocked()
	}
	a.size.Store(int64(len(a.m)))
}

// live reports whether s is the slot of its key's current entry.
func (a *AttemptMemo[K]) live(s memoSlot[K]) bool {
	e, ok := a.m[s.k]
	return ok && e.gen == s.gen
}

// compactLocked drops the stale slots of order.
func (a *AttemptMemo[K]) compactLocked() {
	kept := make([]memoSlot[K], 0, len(a.m))
	for _, s := range a.order {
		if a.live(s) {
			kept = append(kept, s)
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
	return a.m[k].n
}

// Take returns the attempt remembered for k, 0 when none, and forgets it.
func (a *AttemptMemo[K]) Take(k K) int {
	if a.size.Load() == 0 {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.m[k]
	if ok {
		a.forgetLocked(k)
	}
	return e.n
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
