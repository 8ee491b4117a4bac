// Package bytesview converts between strings and byte slices without
// copying, for the few hot paths where a copy shows in the profile: an
// adapter handing a message's strings to its client to write, and the
// decoding arena handing out bytes it never writes again as strings.
//
// Both conversions share memory, so they are safe only under the rule each
// function states; everything else should convert the ordinary way.
package bytesview

import "unsafe"

// Bytes returns s's bytes without a copy. The result must only be read
// (writing to it breaks the immutability of s, which Go relies on); it is
// meant for a client that writes the bytes to the network and keeps none
// of them. Empty s gives a nil or empty slice.
func Bytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// String returns b as a string without a copy. b must never be written
// again, by anyone, for as long as the string is reachable.
func String(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
