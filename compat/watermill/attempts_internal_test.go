package watermill

import "testing"

// The attempt memory forgets the oldest nacked IDs beyond its limit and
// forgets acked ones.
func TestAttemptsMemory(t *testing.T) {
	a := newAttempts(2)
	a.nacked("x", 1)
	a.nacked("y", 3)
	if a.next("x") != 2 || a.next("y") != 4 || a.next("z") != 1 {
		t.Fatalf("next: x %d y %d z %d, want 2 4 1", a.next("x"), a.next("y"), a.next("z"))
	}
	a.nacked("z", 1) // over the limit: x, the oldest, is forgotten
	if a.next("x") != 1 || a.next("z") != 2 {
		t.Errorf("after eviction: x %d z %d, want 1 2", a.next("x"), a.next("z"))
	}
	a.forget("y")
	if a.next("y") != 1 {
		t.Errorf("after ack: y %d, want 1", a.next("y"))
	}
	for i := 0; i < 100; i++ {
		a.nacked("w", i+1)
		a.forget("w")
	}
	if len(a.order) > 4 {
		t.Errorf("order holds %d IDs after repeated nack/ack of one, want it compacted", len(a.order))
	}
}
