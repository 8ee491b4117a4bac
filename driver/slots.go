package driver

// slotTable holds the handles of a subscription's delivered, unsettled
// messages: one slot per message, reused once the message is settled, so
// that delivering and settling cost no map operation and no allocation
// once the table has grown to the window. A token names a slot (low 32
// bits: its index) and one use of it (high 32 bits: a counter), so the
// token of a message whose slot was reused matches nothing. Not safe for
// concurrent use; the subscription's lock guards it.
type slotTable struct {
	slots []slot
	free  []uint32 // indexes of unused slots
	n     int      // slots in use
	uses  uint32   // counter of the latest put
}

type slot struct {
	token  uint64 // 0: unused
	handle any
	size   int64 // the message's bytes, counted against Options.InFlightBytes
}

// put stores h, the handle of a message of size bytes, and returns its
// token, never 0.
func (t *slotTable) put(h any, size int64) uint64 {
	var i uint32
	if k := len(t.free); k > 0 {
		i = t.free[k-1]
		t.free = t.free[:k-1]
	} else {
		i = uint32(len(t.slots))
		t.slots = append(t.slots, slot{})
	}
	t.uses++
	if t.uses == 0 {
		t.uses = 1
	}
	tok := uint64(t.uses)<<32 | uint64(i)
	t.slots[i] = slot{token: tok, handle: h, size: size}
	t.n++
	return tok
}

// take removes the handle of tok and returns it with its size; false if
// tok holds nothing.
func (t *slotTable) take(tok uint64) (any, int64, bool) {
	i := uint32(tok)
	if tok == 0 || int(i) >= len(t.slots) || t.slots[i].token != tok {
		return nil, 0, false
	}
	h, size := t.slots[i].handle, t.slots[i].size
	t.slots[i] = slot{}
	t.free = append(t.free, i)
	t.n--
	return h, size, true
}

// len is the number of handles held.
func (t *slotTable) len() int { return t.n }

// appendHandles appends every held handle to hs.
func (t *slotTable) appendHandles(hs []any) []any {
	for _, s := range t.slots {
		if s.token != 0 {
			hs = append(hs, s.handle)
		}
	}
	return hs
}
