package driver_test

import (
	"testing"

	"github.com/go-relay/relay/driver"
)

// Items come out oldest first, with what they weigh subtracted; deleting
// some keeps the order of the rest; an empty read-ahead pops nothing.
func TestReadAheadOrderAndWeight(t *testing.T) {
	q := driver.NewReadAhead(0, 0, func(s string) int { return len(s) })
	for _, v := range []string{"a", "bb", "ccc", "dddd"} {
		q.Push(v)
	}
	if v, _ := q.Peek(); q.Len() != 4 || q.Bytes() != 10 || v != "a" {
		t.Fatalf("after 4 pushes: %d items, %d bytes, oldest %q", q.Len(), q.Bytes(), v)
	}
	q.DeleteFunc(func(v string) bool { return v == "bb" })
	var got []string
	for {
		v, ok := q.Pop()
		if !ok {
			break
		}
		got = append(got, v)
		if next, _ := q.Peek(); len(got) == 1 && (q.Bytes() != 7 || next != "ccc") {
			t.Fatalf("after the first pop: %d bytes, oldest %q; want 7 and the third push", q.Bytes(), next)
		}
	}
	if want := []string{"a", "ccc", "dddd"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("popped %q, want %q", got, want)
	}
	if _, ok := q.Peek(); q.Len() != 0 || q.Bytes() != 0 || ok {
		t.Fatalf("emptied: %d items, %d bytes, something to peek at %v", q.Len(), q.Bytes(), ok)
	}
}

// Full holds from either bound, HalfEmpty once both are down to half,
// and a read-ahead without bounds is never full.
func TestReadAheadBounds(t *testing.T) {
	q := driver.NewReadAhead(100, 4, weight)
	if q.Full() || !q.HalfEmpty() {
		t.Fatal("an empty read-ahead is full or not half empty")
	}
	q.Push(100)
	if !q.Full() {
		t.Fatal("not full at the byte bound")
	}
	q.Pop()
	for range 4 {
		q.Push(1)
	}
	if !q.Full() || q.HalfEmpty() {
		t.Fatal("at the item bound: not full, or half empty")
	}
	q.Pop()
	if q.Full() || q.HalfEmpty() {
		t.Fatal("3 of 4 items: full, or half empty")
	}
	q.Pop()
	if !q.HalfEmpty() {
		t.Fatal("2 of 4 items: not half empty")
	}
	q.Push(60)
	if q.HalfEmpty() {
		t.Fatal("62 of 100 bytes: half empty")
	}
	q.Clear()
	if q.Len() != 0 || q.Bytes() != 0 || q.Full() {
		t.Fatal("not empty after Clear")
	}

	free := driver.NewReadAhead(0, 0, weight)
	for range 100000 {
		free.Push(1 << 20)
	}
	if free.Full() || free.Room(7) != 7 || !free.TakesWhole(1<<30, 1<<40) {
		t.Fatal("a read-ahead without bounds holds a fetch back")
	}
}

// Room is what the next fetch may bring at the recent item size: one
// before any size is known, at least one, at most the limit.
func TestReadAheadRoom(t *testing.T) {
	q := driver.NewReadAhead(1000, 0, weight)
	if got := q.Room(50); got != 1 {
		t.Fatalf("no size known: Room = %d, want 1", got)
	}
	q.Observe(10)
	if got := q.Room(50); got != 50 {
		t.Fatalf("size 10, 1000 bytes free: Room(50) = %d, want 50", got)
	}
	q.Push(800)
	if got := q.Room(50); got != 20 {
		t.Fatalf("size 10, 200 bytes free: Room = %d, want 20", got)
	}
	q.Push(300)
	if got := q.Room(50); got != 1 {
		t.Fatalf("over the bound: Room = %d, want 1", got)
	}
}

// A fetch is taken whole only while the read-ahead then holds at most
// four times its bounds, by bytes and by items; a larger fetch (records
// that decode to many times the byte bound) is taken as it fits.
func TestReadAheadTakesWholeWithinFourBounds(t *testing.T) {
	const bound, items = 1 << 20, 8192
	for _, tc := range []struct {
		queued, buffered int // bytes
		queue, records   int
		want             bool
	}{
		{0, 3 << 20, 0, 12000, true},             // a fetch of 3 MiB decoded, nothing waiting
		{1 << 20, 3 << 20, 4096, 12000, true},    // exactly four bounds of bytes
		{1<<20 + 1, 3 << 20, 4096, 12000, false}, // one byte over
		{0, 4<<20 + 1, 0, 100, false},            // the fetch alone is too large
		{512 << 10, 12 << 20, 500, 12000, false}, // a well-compressed 1 MiB fetch
		{bound - 1, 1, 1, 1, true},               // a small rest
		{0, 1 << 20, 0, 4*items + 1, false},      // too many records, however small
		{0, 1 << 20, 100, 4 * items, false},      // the waiting items count too
		{0, 1 << 20, 100, 4*items - 100, true},   // up to four times the items
	} {
		q := driver.NewReadAhead(bound, items, weight)
		for i := range tc.queue {
			q.Push(tc.queued*(i+1)/tc.queue - tc.queued*i/tc.queue)
		}
		if got := q.TakesWhole(tc.records, tc.buffered); got != tc.want {
			t.Errorf("%d B in %d waiting, fetch of %d B in %d: TakesWhole = %v, want %v",
				tc.queued, tc.queue, tc.buffered, tc.records, got, tc.want)
		}
	}
}

// Wake never blocks, and any number of Wakes leave one signal.
func TestReadAheadWake(t *testing.T) {
	q := driver.NewReadAhead(0, 0, weight)
	q.Wake()
	q.Wake()
	select {
	case <-q.Ready():
	default:
		t.Fatal("Ready not signalled after Wake")
	}
	select {
	case <-q.Ready():
		t.Fatal("two Wakes left two signals")
	default:
	}
}

// weight is the weigh func of read-aheads whose items are their own
// weights.
func weight(n int) int { return n }
