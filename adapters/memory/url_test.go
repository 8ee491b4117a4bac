package memory_test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/drivertest"
)

// One URL serves both sides (project rule 3); an unknown parameter fails
// on both.
func TestURLBothSides(t *testing.T) {
	drivertest.URLBothSides(t, context.Background(), "mem://urlsides?group=g&inflight=8&max_bytes=1024")
}

// A value of the other side's parameter is still checked.
func TestURLOtherSideValueChecked(t *testing.T) {
	drivertest.URLNamesParam(t, "publisher inflight=x", relay.CheckURL("mem://x?inflight=x"), "inflight")
	drivertest.URLNamesParam(t, "subscriber max_bytes=0", relay.CheckSubscriberURL("mem://x?group=g&max_bytes=0"), "max_bytes")
	drivertest.URLNamesParam(t, "subscriber without group", relay.CheckSubscriberURL("mem://x"), "group")
	if err := relay.CheckURL("mem://x"); err != nil {
		t.Errorf("publisher needs no group: %v", err)
	}
}

// A mistyped parameter is reported with the one it was probably meant to
// be, on both sides.
func TestURLTypoSuggestion(t *testing.T) {
	const want = `parameter "inflite": unknown parameter (did you mean "inflight"?)`
	for name, err := range map[string]error{
		"publisher":  relay.CheckURL("mem://x?inflite=8"),
		"subscriber": relay.CheckSubscriberURL("mem://x?group=g&inflite=8"),
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to contain %s", name, err, want)
		}
	}
}
