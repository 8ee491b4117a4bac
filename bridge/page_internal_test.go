package bridge

import (
	"testing"
	"time"
)

// The first snapshot formats numbers as the page's script does.
func TestPageFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 1843207: "1,843,207", -12345: "-12,345"} {
		if got := pageInt(n); got != want {
			t.Errorf("pageInt(%d) = %q, want %q", n, got, want)
		}
	}
	for r, want := range map[float64]string{0: "0.0 /s", 3.14: "3.1 /s", 99.94: "99.9 /s", 412.6: "413 /s"} {
		if got := pageRate(r); got != want {
			t.Errorf("pageRate(%v) = %q, want %q", r, got, want)
		}
	}
	for b, want := range map[int64]string{7: "7 B", 999: "999 B", 4212: "4.2 kB", 12_500_000: "12.5 MB"} {
		if got := pageBytes(b); got != want {
			t.Errorf("pageBytes(%d) = %q, want %q", b, got, want)
		}
	}
	for d, want := range map[time.Duration]string{-time.Second: "0 s", 59 * time.Second: "59 s", 61 * time.Second: "1 min",
		3 * time.Hour: "3 h", 72 * time.Hour: "3 d"} {
		if got := pageSpan(d); got != want {
			t.Errorf("pageSpan(%v) = %q, want %q", d, got, want)
		}
	}
	if got := pageTime(time.Date(2026, 12, 1, 14, 22, 0, 512e6, time.UTC)); got != "2026-12-01 14:22:00 UTC" {
		t.Errorf("pageTime = %q", got)
	}
}
