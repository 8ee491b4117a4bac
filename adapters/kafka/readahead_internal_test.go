package kafka

import (
	"testing"

	"github.com/go-relay/relay/driver"
)

// A poll takes the client's buffered records whole only while the queue
// then holds at most four times its bounds, by bytes and by records; a
// larger fetch (well-compressed records decode to many times
// fetch_max_bytes) is taken as it fits.
func TestTakesWholeFetchWithinFourBounds(t *testing.T) {
	const bound = 1 << 20
	for _, tc := range []struct {
		queued, buffered int // bytes
		queue, records   int
		want             bool
	}{
		{0, 3 << 20, 0, 12000, true},                  // a fetch of 3 MiB decoded, queue empty
		{1 << 20, 3 << 20, 4096, 12000, true},         // exactly four bounds of bytes
		{1<<20 + 1, 3 << 20, 4096, 12000, false},      // one byte over
		{0, 4<<20 + 1, 0, 100, false},                 // the fetch alone is too large
		{512 << 10, 12 << 20, 500, 12000, false},      // a well-compressed 1 MiB fetch
		{bound - 1, 1, 1, 1, true},                    // a small rest
		{0, 1 << 20, 0, 4*maxAheadRecords + 1, false}, // too many records, however small
		{0, 1 << 20, 100, 4 * maxAheadRecords, false}, // the queue's records count too
	} {
		r := &receiver{aheadBytes: bound, queuedBytes: tc.queued, queue: make([]*handle, tc.queue), window: 256}
		if got := r.takesWhole(tc.records, tc.buffered); got != tc.want {
			t.Errorf("queued %d B in %d, buffered %d B in %d: takesWhole = %v, want %v",
				tc.queued, tc.queue, tc.buffered, tc.records, got, tc.want)
		}
	}
}

// The poll takes all the buffered records when every unpaused queue can
// take them whole, and as many as fit otherwise; a paused topic's queue
// does not hold the others back.
func TestPollSize(t *testing.T) {
	recv := func(queued, sizeGuess int) *receiver {
		return &receiver{aheadBytes: 1 << 20, queuedBytes: queued, sizeGuess: driver.SizeGuess(sizeGuess), window: 256}
	}
	full := recv(1<<20-256, 256)
	full.queue = make([]*handle, 4095)
	for _, tc := range []struct {
		name           string
		recvs          map[string]*receiver
		records, bytes int
		want           int
	}{
		{"nothing buffered: what fits", map[string]*receiver{"a": recv(0, 256)}, 0, 0, 256},
		{"a fetch that fits: all of it", map[string]*receiver{"a": recv(0, 256)}, 12000, 3 << 20, 12000},
		{"a fetch too large: what fits", map[string]*receiver{"a": recv(0, 1024)}, 12000, 12 << 20, 256},
		{"one queue nearly full: what fits it", map[string]*receiver{"a": recv(0, 256), "b": full}, 14000, 7 << 19, 1},
		{"a paused topic does not count", map[string]*receiver{"a": recv(0, 256), "b": func() *receiver { r := recv(4<<20, 256); r.topicPaused = true; return r }()}, 12000, 3 << 20, 12000},
		{"before any record: one", map[string]*receiver{"a": recv(0, 0)}, 0, 0, 1},
	} {
		m := &member{d: &subDriver{maxWindow: 256}, recvs: tc.recvs}
		if got := m.pollSizeFor(tc.records, tc.bytes); got != tc.want {
			t.Errorf("%s: pollSizeFor(%d, %d) = %d, want %d", tc.name, tc.records, tc.bytes, got, tc.want)
		}
	}
}
