package uuid

import "testing"

func TestString(t *testing.T) {
	u := [16]byte{0x01, 0x8f, 0x3a, 0x4b, 0x5c, 0x6d, 0x7e, 0x8f, 0x90, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07}
	if got, want := String(u), "018f3a4b-5c6d-7e8f-90a1-b2c3d4e5f607"; got != want {
		t.Errorf("String = %s, want %s", got, want)
	}
	if got, want := String([16]byte{}), "00000000-0000-0000-0000-000000000000"; got != want {
		t.Errorf("String(zero) = %s, want %s", got, want)
	}
}
