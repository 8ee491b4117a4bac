package bytesview

import (
	"testing"
	"unsafe"
)

func TestBytesSharesTheString(t *testing.T) {
	s := string([]byte("1700000000000-0"))
	b := Bytes(s)
	if string(b) != s || len(b) != len(s) {
		t.Fatalf("Bytes(%q) = %q", s, b)
	}
	if &b[0] != unsafe.StringData(s) {
		t.Fatal("Bytes copied the string")
	}
	if got := Bytes(""); len(got) != 0 {
		t.Fatalf("Bytes(\"\") = %q; want empty", got)
	}
}

func TestStringSharesTheBytes(t *testing.T) {
	b := []byte("payload")
	s := String(b)
	if s != "payload" {
		t.Fatalf("String = %q", s)
	}
	if unsafe.StringData(s) != &b[0] {
		t.Fatal("String copied the bytes")
	}
	if got := String(nil); got != "" {
		t.Fatalf("String(nil) = %q; want empty", got)
	}
}
