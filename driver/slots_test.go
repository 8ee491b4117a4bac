package driver

import "testing"

func TestSlotTableReuse(t *testing.T) {
	var tb slotTable
	a := tb.put("a", 1)
	b := tb.put("b", 1)
	if h, _, ok := tb.take(a); !ok || h != "a" {
		t.Fatalf("take(a) = %v, %v; want a, true", h, ok)
	}
	c := tb.put("c", 1) // reuses a's slot
	if uint32(c) != uint32(a) {
		t.Fatalf("slot of a not reused: a=%x c=%x", a, c)
	}
	if h, _, ok := tb.take(a); ok {
		t.Fatalf("stale token of a took %v from the reused slot", h)
	}
	if _, _, ok := tb.take(0); ok {
		t.Fatal("token 0 took a handle")
	}
	if n := tb.len(); n != 2 {
		t.Fatalf("len = %d, want 2", n)
	}
	got := tb.appendHandles(nil)
	if len(got) != 2 || got[0] != "c" || got[1] != "b" {
		t.Fatalf("handles = %v, want [c b]", got)
	}
	if h, _, ok := tb.take(b); !ok || h != "b" {
		t.Fatalf("take(b) = %v, %v; want b, true", h, ok)
	}
	if h, _, ok := tb.take(b); ok {
		t.Fatalf("second take(b) = %v, true", h)
	}
}
