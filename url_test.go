package relay_test

import (
	"errors"
	"net/url"
	"testing"

	"github.com/go-relay/relay"
)

// checkingOpener records which check ran and fails on ?bad.
type checkingOpener struct {
	fakeOpener
	calls *[]string
}

func (o checkingOpener) check(name string, u *url.URL) error {
	*o.calls = append(*o.calls, name)
	if u.Query().Has("bad") {
		return &relay.URLError{URL: u.String(), Param: "bad", Reason: "unknown parameter"}
	}
	return nil
}

func (o checkingOpener) CheckURL(u *url.URL) error           { return o.check("pub", u) }
func (o checkingOpener) CheckSubscriberURL(u *url.URL) error { return o.check("sub", u) }

func TestCheckURL(t *testing.T) {
	var calls []string
	relay.Register("fake-check", checkingOpener{calls: &calls})
	relay.Register("fake-nocheck", fakeOpener{})

	if err := relay.CheckURL("fake-check://h?x=1"); err != nil {
		t.Errorf("CheckURL: %v", err)
	}
	if err := relay.CheckSubscriberURL("FAKE-check://h?bad=1"); !errors.Is(err, relay.ErrBadURL) {
		t.Errorf("CheckSubscriberURL with ?bad: %v, want ErrBadURL", err)
	}
	if len(calls) != 2 || calls[0] != "pub" || calls[1] != "sub" {
		t.Errorf("checks called: %v, want [pub sub]", calls)
	}
	// Without URLChecker only the scheme is checked.
	if err := relay.CheckURL("fake-nocheck://h?bad=1"); err != nil {
		t.Errorf("CheckURL of an adapter without URLChecker: %v", err)
	}
	if err := relay.CheckURL("nosuch://h"); !errors.Is(err, relay.ErrUnknownScheme) {
		t.Errorf("unknown scheme: %v", err)
	}
	if err := relay.CheckSubscriberURL("nosuch://h"); !errors.Is(err, relay.ErrUnknownScheme) {
		t.Errorf("unknown scheme (subscriber): %v", err)
	}
	if err := relay.CheckURL("no-scheme-here"); !errors.Is(err, relay.ErrBadURL) {
		t.Errorf("no scheme: %v", err)
	}
}
