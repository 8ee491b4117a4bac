// Package uuid formats UUIDs. It holds what the root package's NewID and
// adapters that derive IDs from message content share, so that every ID
// relay produces has one textual form.
package uuid

import "encoding/hex"

// Len is the length of the canonical form.
const Len = 36

// String returns u in the canonical lowercase 8-4-4-4-12 hex form
// (RFC 9562). It does not check or set the version and variant bits.
func String(u [16]byte) string {
	var s [Len]byte
	Format(s[:], u)
	return string(s[:])
}

// Format writes the canonical form of u (see String) to dst[:Len].
func Format(dst []byte, u [16]byte) {
	s := dst[:Len]
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], u[10:16])
}
