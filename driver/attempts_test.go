package driver_test

import (
	"sync"
	"testing"

	"github.com/go-relay/relay/driver"
)

// The memo stays within Max, forgetting the oldest entries first, and
// Recall keeps what Take and Forget drop.
func TestAttemptMemoBounded(t *testing.T) {
	const max = 100
	a := driver.AttemptMemo[int]{Max: max}
	for i := range max + 10 {
		a.Remember(i, i+2)
	}
	if a.Len() != max {
		t.Fatalf("Len %d, want %d", a.Len(), max)
	}
	if a.Recall(0) != 0 || a.Recall(9) != 0 || a.Recall(10) != 12 || a.Recall(max+9) != max+11 {
		t.Error("eviction did not drop exactly the oldest entries")
	}
	if a.Recall(10) != 12 {
		t.Error("Recall forgot the entry")
	}
	if a.Take(10) != 12 || a.Take(10) != 0 {
		t.Error("Take must return the entry and forget it")
	}
	a.Forget(11)
	if a.Recall(11) != 0 || a.Len() != max-2 {
		t.Errorf("Forget left the entry (Len %d)", a.Len())
	}
	a.Remember(12, 40) // replaces, keeps its place in the eviction order
	if a.Recall(12) != 40 || a.Len() != max-2 {
		t.Errorf("Remember of a held key: %d, Len %d", a.Recall(12), a.Len())
	}
	a.Remember(5000, 0)
	if a.Recall(5000) != 0 {
		t.Error("an attempt of 0 was remembered")
	}
}

// Count numbers the deliveries of a key from 1, on from what was
// remembered, within Max: the key counted least recently is forgotten
// first, not all at once.
func TestAttemptMemoCount(t *testing.T) {
	a := driver.AttemptMemo[string]{Max: 3}
	for want := 1; want <= 3; want++ {
		if got := a.Count("a"); got != want {
			t.Fatalf("Count of a: %d, want %d", got, want)
		}
	}
	a.Remember("b", 5)
	if got := a.Count("b"); got != 6 {
		t.Errorf("Count after Remember(5): %d, want 6", got)
	}
	a.Forget("a")
	if got := a.Count("a"); got != 1 {
		t.Errorf("Count after Forget: %d, want 1", got)
	}
	a.Count("c")
	a.Count("b") // counted again: b is now the newest, a the oldest
	a.Count("d") // a fourth key: a goes
	if a.Len() != 3 || a.Recall("a") != 0 || a.Recall("b") != 7 || a.Recall("c") != 1 || a.Recall("d") != 1 {
		t.Errorf("after a fourth key: Len %d, a %d, b %d, c %d, d %d", a.Len(), a.Recall("a"), a.Recall("b"), a.Recall("c"), a.Recall("d"))
	}
}

// A memo that keeps being filled and emptied does not grow.
// A key taken (or forgotten) and remembered again is as new as its second
// Remember: eviction drops the entries older than it, not it.
func TestAttemptMemoEvictsByLastRemember(t *testing.T) {
	for _, drop := range []string{"take", "forget"} {
		t.Run(drop, func(t *testing.T) {
			a := driver.AttemptMemo[string]{Max: 2}
			a.Remember("a", 1)
			a.Remember("b", 1)
			if drop == "take" {
				a.Take("a")
			} else {
				a.Forget("a")
			}
			a.Remember("a", 5)
			a.Remember("c", 1) // full: b, the oldest live entry, goes
			if got := a.Recall("a"); got != 5 {
				t.Errorf("Recall(a) = %d, want 5 (evicted in b's place)", got)
			}
			if got := a.Recall("b"); got != 0 {
				t.Errorf("Recall(b) = %d, want 0 (the oldest entry)", got)
			}
			if got := a.Recall("c"); got != 1 {
				t.Errorf("Recall(c) = %d, want 1", got)
			}
		})
	}
}

func TestAttemptMemoChurn(t *testing.T) {
	var a driver.AttemptMemo[string]
	for i := range 100_000 {
		k := string(rune('a' + i%3))
		a.Remember(k, i+1)
		if i%2 == 0 {
			a.Take(k)
		} else {
			a.Forget(k)
		}
	}
	if a.Len() != 0 {
		t.Fatalf("Len %d after every entry was dropped", a.Len())
	}
	// Entries dropped while others stay: the eviction log is compacted.
	for i := range 100_000 {
		a.Remember("stay", 1)
		a.Remember(string(rune('a'+i%3)), 1)
		a.Forget(string(rune('a' + i%3)))
	}
	if a.Len() != 1 || a.Recall("stay") != 1 {
		t.Fatalf("Len %d, stay %d", a.Len(), a.Recall("stay"))
	}
}

func TestAttemptMemoConcurrent(t *testing.T) {
	a := driver.AttemptMemo[int]{Max: 64}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10_000 {
				k := g*100_000 + i
				a.Remember(k, 2)
				if a.Recall(k) > 2 {
					t.Error("foreign attempt")
				}
				a.Take(k)
			}
		})
	}
	wg.Wait()
	if a.Len() != 0 {
		t.Fatalf("Len %d", a.Len())
	}
}
