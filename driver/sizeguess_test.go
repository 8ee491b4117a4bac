package driver_test

import (
	"testing"

	"github.com/go-relay/relay/driver"
)

// A SizeGuess follows a larger batch at once and a smaller one by an
// eighth per batch; Fit divides room by it.
func TestSizeGuess(t *testing.T) {
	var g driver.SizeGuess
	if g.Known() || g.Fit(1000) != 1000 || g.Fit(0) != 0 || g.Fit(-5) != 0 {
		t.Fatalf("zero value: Known %v, Fit(1000) %d, Fit(0) %d, Fit(-5) %d", g.Known(), g.Fit(1000), g.Fit(0), g.Fit(-5))
	}
	g.Observe(800)
	if !g.Known() || g.Fit(8000) != 10 {
		t.Fatalf("after 800: %d, Fit(8000) %d", g, g.Fit(8000))
	}
	g.Observe(100) // smaller: an eighth less
	if g != 700 {
		t.Fatalf("after a batch of 100 B: %d, want 700", g)
	}
	g.Observe(4000) // larger: at once
	if g != 4000 {
		t.Fatalf("after a batch of 4000 B: %d, want 4000", g)
	}
	for range 100 {
		g.Observe(100)
	}
	if g != 100 {
		t.Fatalf("after 100 batches of 100 B: %d, want 100", g)
	}
}
