package driver

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"github.com/go-relay/relay"
)

// Copies are equal to their source, independent of it and of each other
// (appending to one never writes into the next), and large inputs get
// their own allocation.
func TestArenaCopies(t *testing.T) {
	var a Arena
	src := []byte("payload-one")
	b1 := a.Bytes(src)
	s1 := a.String([]byte("id-1"))
	b2 := a.Bytes([]byte("payload-two"))
	src[0] = 'X'
	if string(b1) != "payload-one" || s1 != "id-1" || string(b2) != "payload-two" {
		t.Fatalf("copies changed: %q %q %q", b1, s1, b2)
	}
	_ = append(b1, "!!!!"...)
	if string(b2) != "payload-two" || s1 != "id-1" {
		t.Fatalf("appending to one copy wrote into a neighbour: %q %q", s1, b2)
	}
	if a.Bytes(nil) != nil || a.String(nil) != "" {
		t.Fatal("empty input should give nil / empty string")
	}
	big := bytes.Repeat([]byte{'b'}, ArenaMax+1)
	if got := a.String(big); got != strings.Repeat("b", ArenaMax+1) {
		t.Fatal("large string not copied whole")
	}
	// Many small copies across chunk boundaries stay intact.
	var kept []string
	for i := range 5000 {
		kept = append(kept, a.String([]byte(strings.Repeat(string(rune('a'+i%26)), 7))))
	}
	for i, s := range kept {
		if s != strings.Repeat(string(rune('a'+i%26)), 7) {
			t.Fatalf("copy %d changed: %q", i, s)
		}
	}
}

// CloneString and CloneMetadata return equal strings in memory of their
// own, so that what a store keeps pins nothing of its source.
func TestArenaClonesStrings(t *testing.T) {
	var a Arena
	src := []byte("shared-id-and-more")
	s := unsafe.String(unsafe.SliceData(src), 9) // "shared-id", over src
	c := a.CloneString(s)
	src[0] = 'X'
	if c != "shared-id" || unsafe.StringData(c) == unsafe.StringData(s) {
		t.Fatalf("CloneString gave %q over its source's memory", c)
	}
	if a.CloneString("") != "" || a.CloneMetadata(nil) != nil || a.CloneMetadata(relay.Metadata{}) != nil {
		t.Fatal("empty input should give an empty result")
	}
	k, v := []byte("name"), []byte("value")
	md := relay.Metadata{unsafe.String(unsafe.SliceData(k), 4): unsafe.String(unsafe.SliceData(v), 5)}
	cm := a.CloneMetadata(md)
	k[0], v[0] = 'X', 'X'
	if len(cm) != 1 || cm["name"] != "value" {
		t.Fatalf("CloneMetadata gave %v after its source changed", cm)
	}
}

var arenaSink []byte

// BenchmarkArenaBytes copies a 300-byte field, the size of a small
// message's payload and ID, as a receiver does for each message.
func BenchmarkArenaBytes(b *testing.B) {
	var a Arena
	p := make([]byte, 300)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		arenaSink = a.Bytes(p)
	}
}
