package middleware

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// MemoryStoreConfig configures a MemoryStore.
type MemoryStoreConfig struct {
	// MaxKeys bounds the keys kept (reserved and done). When full, the key
	// closest to expiry is dropped first. Default 100,000.
	MaxKeys int
	// Now replaces the clock in tests.
	Now func() time.Time
}

// MemoryStore is a Store in process memory: for one replica, or tests. It
// is bounded (MaxKeys) and expires keys lazily on use; it starts no
// goroutine and needs no Close. Safe for concurrent use.
type MemoryStore struct {
	mu   sync.Mutex
	max  int
	now  func() time.Time
	keys map[string]*memKey
	exp  expiryHeap
}

type memKey struct {
	key     string
	token   string // "" once done
	done    bool
	expires time.Time
	index   int
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(cfg MemoryStoreConfig) *MemoryStore {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 100_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &MemoryStore{max: cfg.MaxKeys, now: cfg.Now, keys: map[string]*memKey{}}
}

// Len returns how many keys are kept (expired ones may still count until
// the next call).
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func (s *MemoryStore) expireLocked(now time.Time) {
	for len(s.exp) > 0 && !s.exp[0].expires.After(now) {
		k := heap.Pop(&s.exp).(*memKey)
		delete(s.keys, k.key)
	}
}

// Reserve implements Store.
func (s *MemoryStore) Reserve(_ context.Context, key, token string, lease time.Duration) (DedupState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	if k, ok := s.keys[key]; ok {
		switch {
		case k.done:
			return Done, nil
		case k.token == token:
			k.expires = now.Add(lease)
			heap.Fix(&s.exp, k.index)
			return Reserved, nil
		}
		return InProgress, nil
	}
	for len(s.keys) >= s.max {
		k := heap.Pop(&s.exp).(*memKey)
		delete(s.keys, k.key)
	}
	k := &memKey{key: key, token: token, expires: now.Add(lease)}
	s.keys[key] = k
	heap.Push(&s.exp, k)
	return Reserved, nil
}

// Commit implements Store.
func (s *MemoryStore) Commit(_ context.Context, key, _ string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	k, ok := s.keys[key]
	if !ok {
		for len(s.keys) >= s.max {
			old := heap.Pop(&s.exp).(*memKey)
			delete(s.keys, old.key)
		}
		k = &memKey{key: key, expires: now.Add(ttl)}
		s.keys[key] = k
		heap.Push(&s.exp, k)
	}
	k.done, k.token, k.expires = true, "", now.Add(ttl)
	heap.Fix(&s.exp, k.index)
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[key]
	if !ok || k.done || k.token != token {
		return nil
	}
	heap.Remove(&s.exp, k.index)
	delete(s.keys, key)
	return nil
}

type expiryHeap []*memKey

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *expiryHeap) Push(x any) {
	k := x.(*memKey)
	k.index = len(*h)
	*h = append(*h, k)
}
func (h *expiryHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	k.index = -1
	return k
}
