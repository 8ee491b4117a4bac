package driver_test

import (
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

func TestAddRepeatTakesTheNextFreeNumber(t *testing.T) {
	md := relay.Metadata{"h": "1", "h#3": "explicit"}
	md = driver.AddRepeat(md, "h", "2")
	md = driver.AddRepeat(md, "h", "4")
	want := relay.Metadata{"h": "1", "h#2": "2", "h#3": "explicit", "h#4": "4"}
	if len(md) != len(want) {
		t.Fatalf("got %v, want %v", md, want)
	}
	for k, v := range want {
		if md[k] != v {
			t.Fatalf("md[%q] = %q, want %q (all: %v)", k, md[k], v, md)
		}
	}
	if got := driver.AddRepeat(nil, "x", "v"); got["x#2"] != "v" || len(got) != 1 {
		t.Fatalf("AddRepeat(nil) = %v", got)
	}
}
