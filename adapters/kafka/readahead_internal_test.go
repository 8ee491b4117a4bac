package kafka

import "testing"

// A poll takes the client's buffered fetch whole only while the queue then
// holds at most four times its byte bound; a larger fetch (well-compressed
// records decode to many times fetch_max_bytes) is taken piecewise.
func TestTakesWholeFetchWithinFourBounds(t *testing.T) {
	const bound = 1 << 20
	for _, tc := range []struct {
		queued, buffered int
		want             bool
	}{
		{0, 3 << 20, true},           // a fetch of 3 MiB decoded, queue empty
		{1 << 20, 3 << 20, true},     // exactly four bounds
		{1<<20 + 1, 3 << 20, false},  // one byte over
		{0, 4<<20 + 1, false},        // the fetch alone is too large
		{512 << 10, 12 << 20, false}, // a well-compressed 1 MiB fetch
		{bound - 1, 1, true},         // a small rest
	} {
		r := &receiver{aheadBytes: bound, queuedBytes: tc.queued}
		if got := r.takesWhole(tc.buffered); got != tc.want {
			t.Errorf("queued %d, buffered %d: takesWhole = %v, want %v", tc.queued, tc.buffered, got, tc.want)
		}
	}
}
