package relay_test

import (
	"testing"

	"github.com/go-relay/relay"
)

type declaringOpener struct{ fakeOpener }

func (declaringOpener) URLDefaults() relay.URLDefaults {
	return relay.URLDefaults{SourceWindow: 5, NoGroup: true}
}

// DefaultsOf asks the adapter registered for the URL's scheme; it reports
// false for an adapter that declares nothing, an unknown scheme and a URL
// that does not parse.
func TestDefaultsOf(t *testing.T) {
	relay.Register("fake-declaring", declaringOpener{})
	relay.Register("fake-silent", fakeOpener{})
	if d, ok := relay.DefaultsOf("FAKE-DECLARING://h?group=g"); !ok || d.SourceWindow != 5 || !d.NoGroup {
		t.Errorf("declaring adapter: %+v, %v", d, ok)
	}
	for _, raw := range []string{"fake-silent://h", "fake-unknown://h", "no scheme", "fake-declaring://%zz"} {
		if d, ok := relay.DefaultsOf(raw); ok || d.SourceWindow != 0 || d.NoGroup {
			t.Errorf("%s: %+v, %v; want nothing", raw, d, ok)
		}
	}
}
