package driver

import (
	"strings"
	"unsafe"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/bytesview"
)

// Arena copies the small byte slices and strings of received messages
// (payloads, IDs, keys, metadata values) into shared chunks, so that
// decoding a batch costs one allocation per chunk instead of one per
// field. A receiver keeps one Arena and uses it from its Receive (it is not
// safe for concurrent use).
//
// Slices and strings up to ArenaMax bytes share chunks of ArenaChunk
// bytes; larger ones get their own allocation. A chunk lives while anything
// copied into it is referenced, so a message kept after it was settled
// holds at most ArenaChunk bytes beyond its own. Bytes handed out are
// never written again by the Arena, and the capacity of a returned slice is
// its length, so that appending to it never writes into a neighbour.
type Arena struct{ buf []byte }

// Arena's sizes: see Arena.
const (
	ArenaChunk = 16 << 10
	ArenaMax   = 1 << 10
)

// Bytes returns a copy of p; nil when p is empty.
func (a *Arena) Bytes(p []byte) []byte {
	switch {
	case len(p) == 0:
		return nil
	case len(p) > ArenaMax:
		return append([]byte(nil), p...)
	case cap(a.buf)-len(a.buf) < len(p):
		a.buf = newChunk()
	}
	n := len(a.buf)
	a.buf = append(a.buf, p...)
	return a.buf[n:len(a.buf):len(a.buf)]
}

// newChunk allocates an empty chunk of ArenaChunk bytes' capacity without
// zeroing it: every byte is written by a copy before it is handed out, so
// clearing it first is wasted work on a receiver's hot path (see
// BenchmarkArenaBytes). strings.Builder is the standard library's way to
// get such memory; Grow guarantees the capacity.
func newChunk() []byte {
	var b strings.Builder
	b.Grow(ArenaChunk)
	b.WriteByte(0) // so that String points at the allocation
	return unsafe.Slice(unsafe.StringData(b.String()), ArenaChunk)[:0]
}

// CloneString returns a copy of s, in the arena like String's. A store
// that keeps messages uses it so that what it keeps does not pin the
// memory s came from (a receiver may hand out strings over its client's
// buffers, as kafka:// does with share_payloads=true).
func (a *Arena) CloneString(s string) string {
	return a.String(bytesview.Bytes(s))
}

// CloneMetadata returns a copy of md whose names and values are copies
// too (see CloneString); nil for an empty md.
func (a *Arena) CloneMetadata(md relay.Metadata) relay.Metadata {
	if len(md) == 0 {
		return nil
	}
	c := make(relay.Metadata, len(md))
	for k, v := range md {
		c[a.CloneString(k)] = a.CloneString(v)
	}
	return c
}

// String returns p as a string. Its bytes live in the arena's chunk,
// which is never written again, so the string is immutable as Go
// requires.
func (a *Arena) String(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	if len(p) > ArenaMax {
		return string(p)
	}
	b := a.Bytes(p)
	return bytesview.String(b)
}
