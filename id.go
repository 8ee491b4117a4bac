package relay

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

var idState struct {
	sync.Mutex
	lastMS  uint64
	counter uint16 // 12-bit sequence within one millisecond (RFC 9562 method 1)
}

// NewID returns a new UUIDv7 (RFC 9562) as a lowercase canonical string.
// IDs from one process are strictly increasing, so they sort by creation.
func NewID() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (Go 1.24+)

	ms := uint64(time.Now().UnixMilli())
	idState.Lock()
	if ms <= idState.lastMS {
		idState.counter++
		if idState.counter > 0x0fff { // sequence exhausted: borrow the next millisecond
			idState.lastMS++
			idState.counter = 0
		}
		ms = idState.lastMS
	} else {
		idState.lastMS = ms
		idState.counter = binary.BigEndian.Uint16(u[6:8]) & 0x01ff // random start, room to grow
	}
	seq := idState.counter
	idState.Unlock()

	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(u[0:6], ts[2:8])
	u[6] = 0x70 | byte(seq>>8&0x0f)
	u[7] = byte(seq)
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant

	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], u[10:16])
	return string(s[:])
}
