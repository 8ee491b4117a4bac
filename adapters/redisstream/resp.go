package redisstream

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// The receiver reads entries with go-redis's DoRawWriteTo and parses the RESP
// reply itself, because go-redis hands stream entries over as a map, which
// keeps only the last value of a repeated field. Parsing the raw reply also
// copies each payload once (go-redis makes a string, Decode then a []byte).
// Both RESP2 and RESP3 replies are understood.

// replyError is an error reply of the server, such as "NOGROUP ...".
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks it as a server reply, as go-redis's own errors are.
func (e replyError) RedisError() {}

var errShortReply = errors.New("relay/redis: truncated reply from the server")

// streamEntry is one parsed stream entry.
type streamEntry struct {
	id  string
	msg *relay.Message // nil: the entry was deleted from the stream while pending
}

// respParser walks one raw reply.
type respParser struct {
	b       []byte
	scratch [][]byte // field list of the entry being decoded, reused

	// arena, when not nil, holds the copies of what the parsed messages
	// keep of the reply (see decodeInto); the receiver's, reused across
	// read steps.
	arena *driver.Arena
	// msgs are messages allocated together for the rest of a reply's
	// entries, handed out by newMessage.
	msgs []relay.Message
}

// newMessage returns a zero message for one of the reply's entries, left
// the number of entries not yet parsed, this one included. The messages
// of one reply share an allocation.
func (p *respParser) newMessage(left int) *relay.Message {
	if len(p.msgs) == 0 {
		p.msgs = make([]relay.Message, max(1, min(left, len(p.b)/8))) // a bogus count allocates nothing big
	}
	m := &p.msgs[0]
	p.msgs = p.msgs[1:]
	return m
}

// line returns the type byte and the rest of the next line. Lines are
// short headers, so a plain loop finds their end faster than bytes.Index.
func (p *respParser) line() (byte, []byte, error) {
	b := p.b
	for i := 1; i+1 < len(b); i++ {
		if b[i] == '\r' {
			if b[i+1] != '\n' {
				break
			}
			p.b = b[i+2:]
			return b[0], b[1:i], nil
		}
	}
	return 0, nil, errShortReply
}

// num parses the length of a header line: digits with an optional '-'.
func num(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// errorReply turns an error line into an error.
func errorReply(typ byte, rest []byte, p *respParser) error {
	if typ == '!' { // RESP3 blob error: length, then the text
		n, ok := num(rest)
		if !ok || n < 0 || len(p.b) < n+2 {
			return errShortReply
		}
		msg := string(p.b[:n])
		p.b = p.b[n+2:]
		return replyError(msg)
	}
	return replyError(string(rest))
}

// aggregate reads the header of an array and returns its length, -1 for
// a null reply. With maps true it also accepts a RESP3 map, whose length
// it returns doubled (its keys and values, as in the flat array RESP2
// has in its place).
func (p *respParser) aggregate(maps bool) (int, error) {
	if b := p.b; len(b) > 3 && b[0] == '*' && '0' <= b[1] && b[1] <= '9' && b[2] == '\r' && b[3] == '\n' {
		p.b = b[4:] // the common header of an entry or its fields: one digit
		return int(b[1] - '0'), nil
	}
	typ, rest, err := p.line()
	if err != nil {
		return 0, err
	}
	switch typ {
	case '*', '%', '~':
		if typ == '%' && !maps {
			return 0, fmt.Errorf("relay/redis: unexpected map in the server's reply")
		}
		n, ok := num(rest)
		if !ok {
			return 0, fmt.Errorf("relay/redis: bad length %q in the server's reply", rest)
		}
		if typ == '%' && n > 0 {
			n *= 2
		}
		return max(n, -1), nil
	case '_':
		return -1, nil
	case '-', '!':
		return 0, errorReply(typ, rest, p)
	}
	return 0, fmt.Errorf("relay/redis: unexpected reply type %q from the server", typ)
}

// str reads a bulk or simple string; it aliases p's buffer. A bulk
// string of a well-formed reply, nearly every value of a stream entry,
// takes the fast path; anything else goes through strSlow.
func (p *respParser) str() ([]byte, error) {
	b := p.b
	if len(b) > 0 && b[0] == '$' {
		n, i := 0, 1
		for ; i < len(b) && i < 19 && '0' <= b[i] && b[i] <= '9'; i++ {
			n = n*10 + int(b[i]-'0')
		}
		if start := i + 2; i > 1 && start+n+2 <= len(b) && b[i] == '\r' && b[i+1] == '\n' {
			end := start + n
			p.b = b[end+2:]
			return b[start:end:end], nil
		}
	}
	return p.strSlow()
}

// strSlow is str for every reply type and for malformed replies.
func (p *respParser) strSlow() ([]byte, error) {
	typ, rest, err := p.line()
	if err != nil {
		return nil, err
	}
	switch typ {
	case '$':
		n, ok := num(rest)
		if !ok || n < -1 {
			return nil, fmt.Errorf("relay/redis: bad length %q in the server's reply", rest)
		}
		if n == -1 {
			return nil, nil
		}
		if len(p.b) < n+2 {
			return nil, errShortReply
		}
		s := p.b[:n:n]
		p.b = p.b[n+2:]
		return s, nil
	case '+':
		return rest, nil
	case '_':
		return nil, nil
	case '-', '!':
		return nil, errorReply(typ, rest, p)
	}
	return nil, fmt.Errorf("relay/redis: unexpected reply type %q from the server", typ)
}

// skip passes over one reply of any shape.
func (p *respParser) skip() error {
	typ, rest, err := p.line()
	if err != nil {
		return err
	}
	switch typ {
	case '$', '!', '=':
		n, _ := num(rest)
		if n > 0 {
			if len(p.b) < n+2 {
				return errShortReply
			}
			p.b = p.b[n+2:]
		}
	case '*', '~', '>', '%', '|':
		n, _ := num(rest)
		if typ == '%' || typ == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if err := p.skip(); err != nil {
				return err
			}
		}
	}
	return nil
}

// entries reads an array of stream entries and appends them to out.
func (p *respParser) entries(out []streamEntry) ([]streamEntry, error) {
	n, err := p.aggregate(false)
	if err != nil || n <= 0 {
		return out, err
	}
	out = slices.Grow(out, min(n, len(p.b)/8)) // an entry takes 8 bytes or more: a bogus length allocates nothing big
	for i := range n {
		parts, err := p.aggregate(false)
		if err != nil {
			return out, err
		}
		if parts < 2 {
			if parts > 0 {
				if err := p.skip(); err != nil {
					return out, err
				}
			}
			continue // a null entry: nothing to deliver
		}
		idb, err := p.str()
		if err != nil {
			return out, err
		}
		e := streamEntry{id: keepString(p.arena, idb)}
		nf, err := p.aggregate(true)
		if err != nil {
			return out, err
		}
		if nf >= 0 {
			p.scratch = p.scratch[:0]
			for range nf / 2 {
				k, err := p.str()
				if err != nil {
					return out, err
				}
				v, err := p.str()
				if err != nil {
					return out, err
				}
				p.scratch = append(p.scratch, k, v)
			}
			e.msg = p.newMessage(n - i)
			decodeInto(e.msg, e.id, p.scratch, p.arena)
		}
		for range parts - 2 { // fields added by newer servers (XREADGROUP CLAIM)
			if err := p.skip(); err != nil {
				return out, err
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// parseStreams parses an XREADGROUP reply (streams and their entries);
// a null reply (the wait ended without entries) gives no entries.
// Copies of what the entries keep go to arena when it is not nil.
func parseStreams(raw []byte, arena *driver.Arena) ([]streamEntry, error) {
	p := respParser{b: raw, arena: arena}
	resp3 := len(raw) > 0 && raw[0] == '%' // a map of key to entries
	n, err := p.aggregate(true)
	if err != nil || n <= 0 {
		return nil, err
	}
	if resp3 {
		n /= 2
	}
	var out []streamEntry
	for range n {
		if !resp3 { // RESP2: an array of [key, entries]
			if m, err := p.aggregate(false); err != nil || m != 2 {
				return nil, cmp.Or(err, fmt.Errorf("relay/redis: stream reply has %d elements, want 2", m))
			}
		}
		if _, err := p.str(); err != nil { // the stream key
			return nil, err
		}
		if out, err = p.entries(out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseAutoClaim parses an XAUTOCLAIM reply: the next cursor and the
// claimed entries (the IDs of deleted entries that Redis 7 appends are
// already removed from the PEL by the server and are skipped).
func parseAutoClaim(raw []byte, arena *driver.Arena) (string, []streamEntry, error) {
	p := respParser{b: raw, arena: arena}
	n, err := p.aggregate(false)
	if err != nil {
		return "", nil, err
	}
	if n < 2 {
		return "", nil, fmt.Errorf("relay/redis: XAUTOCLAIM reply has %d elements, want 2 or 3", n)
	}
	cur, err := p.str()
	if err != nil {
		return "", nil, err
	}
	out, err := p.entries(nil)
	if err != nil {
		return "", nil, err
	}
	return string(cur), out, nil
}
