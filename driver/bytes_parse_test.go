package driver

import "testing"

func TestParseBytes(t *testing.T) {
	good := map[string]int64{"1": 1, "1048576": 1 << 20, "512KiB": 512 << 10, "64MiB": 64 << 20, "1GiB": 1 << 30, "100B": 100, " 2 MiB": 2 << 20}
	for in, want := range good {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5", "1.5MiB", "64MB", "ten", "9999999999TiB"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}
