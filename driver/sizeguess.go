package driver

// SizeGuess estimates the size of a stream's messages from the batches
// read so far, for sizing the next read against a byte bound (the
// subscription's InFlightBytes; an adapter's own read-ahead): after each
// batch it is that batch's largest message, or an eighth less than before
// when that is more, so that one large message is not forgotten at the
// next batch and a stream whose messages shrank is soon read in larger
// batches again. The zero value knows no size. Not safe for concurrent use.
type SizeGuess int64

// Observe takes the largest message size of a batch; call it only for a
// batch that brought messages (an empty one says nothing about sizes).
func (g *SizeGuess) Observe(largest int64) {
	*g = SizeGuess(max(largest, int64(*g)-int64(*g)/8))
}

// Known reports whether a positive size was observed (a batch of empty
// messages teaches nothing).
func (g SizeGuess) Known() bool { return g > 0 }

// Fit is how many messages of the estimated size fit in room bytes:
// room divided by the estimate (of at least one byte), 0 when room is not
// positive.
func (g SizeGuess) Fit(room int64) int64 {
	if room <= 0 {
		return 0
	}
	return room / max(1, int64(g))
}
