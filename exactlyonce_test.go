package relay_test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-relay/relay"
)

func TestExactlyOnceOpenerRules(t *testing.T) {
	relay.Register("fake-eo-a", fakeOpener{})
	relay.Register("fake-eo-b", &otherOpener{})
	cases := []struct{ src, dst, want string }{
		{"fake-eo-a://x", "fake-eo-b://y", "one backend, in one transaction; got fake-eo-a:// to fake-eo-b://"},
		{"fake-eo-a://x", "fake-eo-a://y", "the fake-eo-a:// adapter offers no exactly-once pair"},
		{"nope-eo://x", "fake-eo-a://y", "unknown URL scheme"},
	}
	for _, c := range cases {
		if err := relay.CheckExactlyOnce(c.src, c.dst); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckExactlyOnce(%s, %s): %v; want %q", c.src, c.dst, err, c.want)
		}
		if _, _, err := relay.OpenExactlyOnce(context.Background(), c.src, c.dst); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OpenExactlyOnce(%s, %s): %v; want %q", c.src, c.dst, err, c.want)
		}
	}
}

// otherOpener is an opener distinct from fakeOpener{}.
type otherOpener struct{ fakeOpener }
