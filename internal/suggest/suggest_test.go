package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"group", "inflight", "inflight_bytes", "max_bytes", "confirm", "address", "disabled", "id"}
	for _, c := range []struct{ name, want string }{
		{"inflite", "inflight"},  // 3 edits in 8 letters
		{"infligth", "inflight"}, // transposition: 2 edits
		{"Inflight_Byte", "inflight_bytes"},
		{"confrim", "confirm"},
		{"adress", "address"},
		{"grup", "group"},
		{"maxbytes", "max_bytes"},
		{"ID", "id"},       // case only
		{"xy", ""},         // as many edits as "id" is long: no hint
		{"visibility", ""}, // nothing close
		{"", ""},
	} {
		if got := Closest(c.name, known); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	if got := Closest("groop", []string{"group", "groep"}); got != "group" {
		t.Errorf("tie: Closest = %q, want the first of equally close names", got)
	}
}
