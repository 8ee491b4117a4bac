package driver

// ReadAhead holds what a receiver's broker client brought before a
// Receive asked for it: the records of a fetch that serves several
// subscriptions (Kafka's group member), or the messages a broker pushes
// (MQTT). Items wait oldest first until Receive pops them. It bounds
// itself by bytes and by count, as its fetcher asks: Full says to stop
// fetching, Room how many items of the recent size the next fetch may
// bring, TakesWhole whether a fetch past the bounds may still be taken
// whole, and HalfEmpty when a fetcher stopped by Full may go on. A zero
// bound is no bound. An item weighs what the weigh func given to
// NewReadAhead says.
//
// ReadAhead is not safe for concurrent use: the receiver guards it with
// its own lock, beside the state its items refer to. Wake and Ready are
// the exception; they may be called without the lock.
type ReadAhead[T any] struct {
	maxBytes, maxItems int
	weigh              func(T) int
	items              []T
	bytes              int
	sizes              SizeGuess
	ready              chan struct{}
}

// NewReadAhead returns an empty read-ahead bounded by maxBytes of item
// bytes and maxItems items; 0 leaves that bound off. weigh tells what an
// item weighs against maxBytes, the same every time it is asked; nil
// weighs nothing.
func NewReadAhead[T any](maxBytes, maxItems int, weigh func(T) int) *ReadAhead[T] {
	if weigh == nil {
		weigh = func(T) int { return 0 }
	}
	return &ReadAhead[T]{maxBytes: maxBytes, maxItems: maxItems, weigh: weigh, ready: make(chan struct{}, 1)}
}

// Push appends v. It never refuses an item: the fetcher asks Full and
// Room before it fetches. Push does not Wake.
func (q *ReadAhead[T]) Push(v T) {
	q.items = append(q.items, v)
	q.bytes += q.weigh(v)
}

// Observe takes the largest item size of a fetch that brought items, for
// Room.
func (q *ReadAhead[T]) Observe(largest int) { q.sizes.Observe(int64(largest)) }

// Pop removes and returns the oldest item; ok is false when there is none.
func (q *ReadAhead[T]) Pop() (v T, ok bool) {
	if len(q.items) == 0 {
		return v, false
	}
	v = q.items[0]
	var zero T
	q.items[0] = zero
	q.items = q.items[1:]
	q.bytes -= q.weigh(v)
	if len(q.items) == 0 {
		q.items, q.bytes = nil, 0
	}
	return v, true
}

// Peek returns the oldest item without removing it; ok is false when
// there is none.
func (q *ReadAhead[T]) Peek() (v T, ok bool) {
	if len(q.items) == 0 {
		return v, false
	}
	return q.items[0], true
}

// Len is the number of items waiting.
func (q *ReadAhead[T]) Len() int { return len(q.items) }

// Bytes is what the waiting items weigh.
func (q *ReadAhead[T]) Bytes() int { return q.bytes }

// DeleteFunc removes the items for which del reports true, keeping the
// order of the others.
func (q *ReadAhead[T]) DeleteFunc(del func(T) bool) {
	kept := q.items[:0]
	for _, v := range q.items {
		if del(v) {
			q.bytes -= q.weigh(v)
			continue
		}
		kept = append(kept, v)
	}
	clear(q.items[len(kept):])
	q.items = kept
	if len(q.items) == 0 {
		q.items, q.bytes = nil, 0
	}
}

// Clear removes every item.
func (q *ReadAhead[T]) Clear() { q.items, q.bytes = nil, 0 }

// Full reports whether the fetcher should stop: something waits and the
// items reach a bound.
func (q *ReadAhead[T]) Full() bool {
	return len(q.items) > 0 && (q.over(q.bytes, q.maxBytes) || q.over(len(q.items), q.maxItems))
}

// HalfEmpty reports whether a fetcher stopped by Full may fetch again:
// the items are down to half of each bound.
func (q *ReadAhead[T]) HalfEmpty() bool {
	return (q.maxBytes == 0 || q.bytes <= q.maxBytes/2) && (q.maxItems == 0 || len(q.items) <= q.maxItems/2)
}

// Room is how many items the next fetch may bring without passing the
// byte bound by more than an item, at the size of recent fetches (see
// SizeGuess): 1 before any size is known, at least 1, at most limit (and
// limit without a byte bound).
func (q *ReadAhead[T]) Room(limit int) int {
	if q.maxBytes == 0 {
		return limit
	}
	if !q.sizes.Known() {
		return 1
	}
	return max(1, min(limit, int(q.sizes.Fit(int64(q.maxBytes-q.bytes)))))
}

// TakesWhole reports whether a fetch of items items weighing bytes may
// be taken whole though it passes the bounds: whether the read-ahead then
// holds at most four times each bound. A client that fetches again only
// once its buffered fetch is taken (franz-go) would otherwise keep a
// fetch that decodes to more than the bound (compressed records) until
// the read-ahead has nearly run dry.
func (q *ReadAhead[T]) TakesWhole(items, bytes int) bool {
	return (q.maxBytes == 0 || int64(q.bytes)+int64(bytes) <= 4*int64(q.maxBytes)) &&
		(q.maxItems == 0 || len(q.items)+items <= 4*q.maxItems)
}

func (q *ReadAhead[T]) over(n, bound int) bool { return bound > 0 && n >= bound }

// Wake signals Ready, without blocking: a Receive waiting there looks
// again (items were pushed, or the receiver has something else for it).
// Safe for concurrent use.
func (q *ReadAhead[T]) Wake() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Ready is signalled by Wake; one signal stands for any number of Wakes
// until it is received.
func (q *ReadAhead[T]) Ready() <-chan struct{} { return q.ready }
