package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

func TestTrackerContiguousPrefix(t *testing.T) {
	p := newPartState(0)
	for o := int64(10); o < 20; o++ {
		p.add(o, 3, 1)
	}
	if p.dirty() {
		t.Fatal("dirty before any ack")
	}
	// 12 before 10 and 11: nothing moves.
	if p.ack(12) || p.target.Offset != -1 {
		t.Fatalf("ack 12 moved the target to %d", p.target.Offset)
	}
	if !p.ack(10) || p.target.Offset != 11 {
		t.Fatalf("target %d after 10, want 11", p.target.Offset)
	}
	// 11 closes the gap: the target jumps over 12.
	if !p.ack(11) || p.target.Offset != 13 || p.target.Epoch != 3 {
		t.Fatalf("target %+v after 11, want 13", p.target)
	}
	if p.ack(11) || p.ack(99) {
		t.Fatal("a repeated or unknown ack moved the target")
	}
	if p.pending() != 7 {
		t.Fatalf("pending %d, want 7", p.pending())
	}
	p.committed = 13
	if p.dirty() {
		t.Fatal("dirty after commit")
	}
	for o := int64(19); o >= 13; o-- {
		p.ack(o)
	}
	if p.target.Offset != 20 || p.pending() != 0 || len(p.entries) != 0 {
		t.Fatalf("target %d pending %d entries %d", p.target.Offset, p.pending(), len(p.entries))
	}
}

func TestTrackerGapsAndRewind(t *testing.T) {
	p := newPartState(1)
	// Offsets need not be contiguous (transaction markers, compaction).
	for _, o := range []int64{5, 7, 8, 12} {
		p.add(o, 0, 1)
	}
	p.ack(7)
	p.ack(5)
	if p.target.Offset != 8 {
		t.Fatalf("target %d, want 8", p.target.Offset)
	}
	// The log was truncated and the client rewound to 8: 8 and 12 are replaced.
	p.add(8, 1, 1)
	if p.pending() != 1 || p.find(12) != nil {
		t.Fatalf("rewind kept %d entries", p.pending())
	}
	p.ack(8)
	if p.target.Offset != 9 || p.target.Epoch != 1 {
		t.Fatalf("target %+v", p.target)
	}
}

func TestTrackerCompacts(t *testing.T) {
	p := newPartState(0)
	p.add(0, 0, 1) // held: blocks the prefix
	for o := int64(1); o < 5000; o++ {
		p.add(o, 0, 1)
		p.ack(o)
	}
	if p.pending() != 5000 || p.target.Offset != -1 {
		t.Fatalf("pending %d target %d", p.pending(), p.target.Offset)
	}
	p.ack(0)
	if p.target.Offset != 5000 || len(p.entries) != 0 {
		t.Fatalf("target %d entries %d", p.target.Offset, len(p.entries))
	}
	// A long run acked in order reuses the slice.
	before := cap(p.entries)
	for o := int64(5000); o < 20000; o++ {
		p.add(o, 0, 1)
		if o%3 == 2 {
			for a := o - 2; a <= o; a++ {
				p.ack(a)
			}
		}
	}
	if cap(p.entries) != before || len(p.entries) > 2 {
		t.Fatalf("entries len %d cap %d, was cap %d", len(p.entries), cap(p.entries), before)
	}
	var unacked int
	p.unacked(func(entry) { unacked++ })
	if unacked != p.pending() {
		t.Fatalf("unacked %d pending %d", unacked, p.pending())
	}
}

func TestCodec(t *testing.T) {
	m := &relay.Message{ID: "x", Key: "k", Payload: []byte("p"), Metadata: relay.Metadata{
		"relay-id": "a", "relay-md-b": "b", "relay-": "c", "plain": "d", "": "e",
	}}
	r := encodeRecord("t", m)
	names := map[string]bool{}
	for _, h := range r.Headers {
		if names[h.Key] {
			t.Fatalf("duplicate header %q", h.Key)
		}
		names[h.Key] = true
	}
	if !names["relay-md-relay-id"] || !names["relay-md-relay-md-b"] || !names["plain"] {
		t.Fatalf("headers %v", names)
	}
	r.Partition, r.Offset = 2, 7
	got := decodeRecord(r)
	if got.ID != "x" || got.Key != "k" || string(got.Payload) != "p" || len(got.Metadata) != len(m.Metadata) {
		t.Fatalf("decoded %+v", got)
	}
	for k, v := range m.Metadata {
		if got.Metadata[k] != v {
			t.Fatalf("metadata %q = %q, want %q", k, got.Metadata[k], v)
		}
	}
	// The payload is a copy.
	got.Payload[0] = 'X'
	if string(r.Value) != "p" {
		t.Fatal("decoded payload aliases the record")
	}
	// With a nil arena (share_payloads=true) the message shares the
	// record's bytes, and an append to the payload cannot reach the bytes
	// after it in the fetch buffer.
	buf := []byte("pqNEXT")
	r.Value = buf[:2]
	var shared relay.Message
	decodeInto(&shared, r, nil)
	if shared.ID != "x" || shared.Key != "k" || string(shared.Payload) != "pq" {
		t.Fatalf("shared decode %+v", shared)
	}
	shared.Payload[0] = 'X'
	if r.Value[0] != 'X' {
		t.Fatal("shared payload is a copy")
	}
	_ = append(shared.Payload, '!')
	if string(buf) != "XqNEXT" {
		t.Fatalf("append to a shared payload wrote into the buffer: %q", buf)
	}
	// A record without relay-id gets a stable ID from its position.
	if id := decodeRecord(&kgo.Record{Topic: "t", Partition: 2, Offset: 7}).ID; id != "kafka:t:2:7" {
		t.Fatalf("foreign id %q", id)
	}
	// recordSize bounds what kgo will encode.
	if n := recordSize(m); n < len("p")+len("k")+len("x") {
		t.Fatalf("size %d", n)
	}
}

func TestTrackerStuck(t *testing.T) {
	p := newPartState(0)
	for o := int64(0); o < 10; o++ {
		p.add(o, 0, 1)
	}
	now := p.headSince
	if p.stuck(10, time.Second, now.Add(500*time.Millisecond)) {
		t.Fatal("stuck within the grace")
	}
	if !p.stuck(10, time.Second, now.Add(time.Second)) {
		t.Fatal("not stuck after the grace")
	}
	if p.stuck(11, time.Second, now.Add(time.Hour)) {
		t.Fatal("stuck below the bound")
	}
}

// find must return the entry of exactly the offset asked for, whether the
// offsets are dense (found where a dense run puts them) or have gaps (the
// dense guess lands on another entry, and the search takes over).
func TestTrackerFind(t *testing.T) {
	p := newPartState(0)
	offsets := []int64{3, 4, 5, 9, 10, 11, 12, 20, 21}
	for _, o := range offsets {
		p.add(o, 0, 1)
	}
	p.ack(3) // head moves past 3
	live := map[int64]bool{}
	for _, o := range offsets[1:] {
		live[o] = true
	}
	for o := int64(0); o < 25; o++ {
		e := p.find(o)
		switch {
		case live[o] && (e == nil || e.offset != o):
			t.Fatalf("find(%d) = %+v, want its entry", o, e)
		case !live[o] && e != nil:
			t.Fatalf("find(%d) = %+v, want nil", o, e)
		}
	}
}

// Handles of a revoked partition are stale: their settlements change
// nothing and queued ones are not handed out, even once the partition is
// assigned again (a new state), whose records belong to the new
// assignment.
func TestRevokedHandlesAreStale(t *testing.T) {
	r := &receiver{d: &subDriver{}, parts: map[int32]*partState{}, ahead: driver.NewReadAhead(1<<20, 0, handleBytes)}
	old := newPartState(0)
	old.add(5, 0, 1)
	old.add(6, 0, 1)
	r.parts[0] = old
	acked, queued := &handle{ps: old, rec: &kgo.Record{Offset: 5}}, &handle{ps: old, rec: &kgo.Record{Offset: 6}}
	r.forget(old) // revoked; it remembers the attempts of 5 and 6 process-wide
	t.Cleanup(func() {
		for _, off := range []int64{5, 6} {
			attempts.Take(attemptKey{partition: 0, offset: off})
		}
	})
	delete(r.parts, 0)
	fresh := newPartState(0) // assigned again
	fresh.add(5, 0, 1)
	r.parts[0] = fresh
	if err := r.Settle(t.Context(), []driver.Settle{{Handle: acked, Ack: true}}); err != nil {
		t.Fatal(err)
	}
	if old.target.Offset != -1 || fresh.target.Offset != -1 || fresh.entries[0].acked {
		t.Fatalf("a stale ack moved a target: old %d, fresh %d", old.target.Offset, fresh.target.Offset)
	}
	r.mu.Lock()
	r.ahead.Push(queued)
	got := r.take(10)
	r.mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("a queued handle of the revoked partition was handed out: %d", len(got))
	}

	// The revocation path itself: drop forgets the state and purges its
	// queued records, and keeps those of other partitions.
	r.m = &member{room: make(chan struct{}, 1)}
	other := newPartState(1)
	other.add(9, 0, 1)
	r.parts[1] = other
	kept := &handle{ps: other, rec: &kgo.Record{Partition: 1, Offset: 9, Value: []byte("bb")}}
	r.ahead.Push(&handle{ps: fresh, rec: &kgo.Record{Offset: 5, Value: []byte("a")}})
	r.ahead.Push(kept)
	r.drop([]int32{0}, false)
	t.Cleanup(func() { attempts.Take(attemptKey{partition: 0, offset: 5}) })
	if !fresh.revoked || other.revoked || r.parts[0] != nil {
		t.Fatalf("after drop: dropped revoked %v, other revoked %v, state kept %v", fresh.revoked, other.revoked, r.parts[0] != nil)
	}
	if n, b := r.ahead.Len(), r.ahead.Bytes(); n != 1 || b != 2 {
		t.Fatalf("after drop: %d records (%d bytes) ahead, want only the other partition's (2 bytes)", n, b)
	}
	if h, _ := r.ahead.Pop(); h != kept {
		t.Fatalf("after drop: the record ahead is %v, want the other partition's", h)
	}
}
