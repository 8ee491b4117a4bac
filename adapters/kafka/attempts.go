package kafka

import (
	"sync"
	"sync/atomic"
)

// Kafka has no delivery counter, so attempts are counted in process. A
// receiver counts redeliveries of its own Nacks; when a partition leaves a
// receiver (revocation, Close) with unacked records, their delivery counts
// are remembered here, so that a later subscription of the same group in
// this process continues the count. Another process starts again at 1.
//
// The memory is bounded: beyond attemptMemoMax entries the oldest are
// forgotten.
const attemptMemoMax = 100_000

type attemptKey struct {
	scope     string // brokers and group
	topic     string
	partition int32
	offset    int64
}

var attemptMemo struct {
	size  atomic.Int64 // lets the hot path skip the lock when empty
	mu    sync.Mutex
	m     map[attemptKey]int32
	order []attemptKey // insertion order, for eviction; may hold stale keys
}

func rememberAttempts(k attemptKey, deliveries int32) {
	if deliveries <= 0 {
		return
	}
	attemptMemo.mu.Lock()
	defer attemptMemo.mu.Unlock()
	if attemptMemo.m == nil {
		attemptMemo.m = make(map[attemptKey]int32)
	}
	if _, ok := attemptMemo.m[k]; !ok {
		attemptMemo.order = append(attemptMemo.order, k)
	}
	attemptMemo.m[k] = deliveries
	for len(attemptMemo.m) > attemptMemoMax && len(attemptMemo.order) > 0 {
		delete(attemptMemo.m, attemptMemo.order[0])
		attemptMemo.order = attemptMemo.order[1:]
	}
	if len(attemptMemo.order) > 2*attemptMemoMax {
		live := attemptMemo.order[:0]
		for _, o := range attemptMemo.order {
			if _, ok := attemptMemo.m[o]; ok {
				live = append(live, o)
			}
		}
		attemptMemo.order = live
	}
	attemptMemo.size.Store(int64(len(attemptMemo.m)))
}

// recallAttempts returns and forgets the deliveries remembered for k (0 if none).
func recallAttempts(k attemptKey) int32 {
	if attemptMemo.size.Load() == 0 {
		return 0
	}
	attemptMemo.mu.Lock()
	defer attemptMemo.mu.Unlock()
	n, ok := attemptMemo.m[k]
	if ok {
		delete(attemptMemo.m, k)
		attemptMemo.size.Store(int64(len(attemptMemo.m)))
		if len(attemptMemo.m) == 0 {
			attemptMemo.order = attemptMemo.order[:0]
		}
	}
	return n
}
