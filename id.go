package relay

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"github.com/go-relay/relay/internal/uuid"
)

var idState struct {
	sync.Mutex
	lastMS  uint64
	counter uint16 // 12-bit sequence within one millisecond (RFC 9562 method 1)
	// random holds crypto/rand output for the next IDs, read a block at
	// a time so that an ID costs no system call; used bytes are zeroed.
	random [idRandomBlock]byte
	used   int
}

// idRandomBlock is how many random bytes NewID reads at once (32 IDs).
const idRandomBlock = 32 * 16

// NewID returns a new UUIDv7 (RFC 9562) as a lowercase canonical string.
// IDs from one process are strictly increasing, so they sort by creation.
// Safe for concurrent use.
func NewID() string {
	var u [16]byte
	ms := uint64(time.Now().UnixMilli())
	idState.Lock()
	if idState.used == 0 || idState.used == len(idState.random) {
		_, _ = rand.Read(idState.random[:]) // crypto/rand.Read never fails (Go 1.24+)
		idState.used = 0
	}
	r := idState.random[idState.used : idState.used+16]
	copy(u[:], r)
	clear(r)
	idState.used += 16
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

	return uuid.String(u)
}
