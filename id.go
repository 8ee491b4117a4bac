package relay

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/go-relay/relay/internal/bytesview"
	"github.com/go-relay/relay/internal/uuid"
)

var idState struct {
	sync.Mutex
	lastMS  uint64
	counter uint16 // 12-bit sequence within one millisecond (RFC 9562 method 1)
	// random is a ChaCha8 generator (a CSPRNG that erases its past key as
	// it goes) seeded from crypto/rand, and reseeded every idReseed IDs:
	// an ID's random bits cost a few nanoseconds, where reading
	// crypto/rand, even 32 IDs' worth at a time, costs many times that
	// per ID.
	random *mrand.ChaCha8
	left   int // IDs until the next reseed
	// The clock: Unix time in ns is offset plus the monotonic time since
	// idEpoch, re-read from the wall clock every idReanchor. One
	// monotonic read costs half of time.Now, which reads both clocks.
	offset   int64
	reanchor time.Duration // the monotonic time of the next re-read
	// text is the chunk the next IDs' strings are written to: one
	// allocation per idChunk IDs instead of one per ID.
	text []byte
}

// idChunk is how many IDs share one allocation of their text. A string
// kept keeps its chunk (idChunk*36 = 576 bytes) alive, as an ID a
// receiver copied keeps its driver.Arena chunk.
const idChunk = 16

// idEpoch is the origin of the monotonic times NewID reads.
var idEpoch = time.Now()

// idReanchor is how often NewID re-reads the wall clock; a step of the
// wall clock reaches the IDs' timestamps at most this late.
const idReanchor = time.Second

// idReseed is how many IDs NewID draws from one seed.
const idReseed = 1 << 16

// NewID returns a new UUIDv7 (RFC 9562) as a lowercase canonical string.
// IDs from one process are strictly increasing, so they sort by creation.
// Safe for concurrent use.
func NewID() string {
	var u [16]byte
	mono := time.Since(idEpoch)
	idState.Lock()
	if mono >= idState.reanchor {
		now := time.Now()
		at := now.Sub(idEpoch) // monotonic, as mono
		idState.offset = now.UnixNano() - int64(at)
		idState.reanchor = at + idReanchor
	}
	ms := uint64((int64(mono) + idState.offset) / int64(time.Millisecond))
	if idState.left == 0 {
		var seed [32]byte
		_, _ = rand.Read(seed[:]) // crypto/rand.Read never fails (Go 1.24+)
		if idState.random == nil {
			idState.random = mrand.NewChaCha8(seed)
		} else {
			idState.random.Seed(seed)
		}
		idState.left = idReseed
	}
	idState.left--
	binary.BigEndian.PutUint64(u[8:16], idState.random.Uint64())
	if ms <= idState.lastMS {
		idState.counter++
		if idState.counter > 0x0fff { // sequence exhausted: borrow the next millisecond
			idState.lastMS++
			idState.counter = 0
		}
		ms = idState.lastMS
	} else {
		idState.lastMS = ms
		idState.counter = uint16(idState.random.Uint64()) & 0x01ff // random start, room to grow
	}
	seq := idState.counter
	if len(idState.text) == cap(idState.text) {
		idState.text = make([]byte, 0, idChunk*uuid.Len)
	}
	n := len(idState.text)
	idState.text = idState.text[:n+uuid.Len]
	text := idState.text[n : n+uuid.Len : n+uuid.Len] // this call's alone
	idState.Unlock()

	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(u[0:6], ts[2:8])
	u[6] = 0x70 | byte(seq>>8&0x0f)
	u[7] = byte(seq)
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant

	uuid.Format(text, u)
	// text is never written again: the string is immutable, as Go requires.
	return bytesview.String(text)
}
