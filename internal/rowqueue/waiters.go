package rowqueue

import "sync"

// Waiters is the wake-up channels of a process's subscriptions, by
// topic. The zero value is ready; it is safe for concurrent use.
type Waiters struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
}

// Add registers c to be signalled for topic.
func (w *Waiters) Add(topic string, c chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]map[chan struct{}]struct{}{}
	}
	if w.m[topic] == nil {
		w.m[topic] = map[chan struct{}]struct{}{}
	}
	w.m[topic][c] = struct{}{}
}

// Remove stops signalling c for topic.
func (w *Waiters) Remove(topic string, c chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m[topic], c)
	if len(w.m[topic]) == 0 {
		delete(w.m, topic)
	}
}

// Wake signals topic's channels, or every channel for "".
func (w *Waiters) Wake(topic string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for t, cs := range w.m {
		if topic != "" && t != topic {
			continue
		}
		for c := range cs {
			Signal(c)
		}
	}
}

// Signal sends on c, a channel with a buffer of one, without blocking: a
// signal already pending is enough.
func Signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
