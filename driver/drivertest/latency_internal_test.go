package drivertest

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ds := make([]time.Duration, 0, 200)
	for i := 200; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 100 * time.Millisecond}, {99, 198 * time.Millisecond}, {99.9, 200 * time.Millisecond}, {100, 200 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := percentileF(ds, c.p); got != c.want {
			t.Errorf("p%v of 1..200ms = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one value = %v, want 7", got)
	}
}
