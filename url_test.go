package relay_test

import (
	"errors"
	"net/url"
	"strings"
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

// URL errors say what is wrong, where, and never quote a password.
func TestParseURLReasons(t *testing.T) {
	const secret = "Pw9Secret"
	cases := []struct{ raw, want string }{
		{"redis://u:" + secret + "#x@h:6379/0", `passwords and user names must be percent-encoded; write "#" as %23`},
		{"redis://u:" + secret + "/x@h:6379/0", `write "/" as %2F`},
		{"redis://u:" + secret + "?x@h:6379/0?group=g", `write "?" as %3F`},
		{"redis://u:" + secret + " x@h:6379/0", `write " " as %20`},
		{"redis://u:" + secret + "%x@h:6379/0", `write "%" as %25`},
		{"redis://u:" + secret + "@#x@h:6379/0", `write "@" as %40, "#" as %23`},
		{"redis://u:12#" + secret + "@h", `write "#" as %23`}, // parses, into host u:12 and a fragment
		{"localhost:6379", "no scheme: this looks like host:port"},
		{"127.0.0.1:6379", "no scheme: this looks like host:port"},
		{"redis.example.com:6379/0", "no scheme: this looks like host:port"},
		{"no-scheme-here", "no scheme: write one first (registered: "},
		{"://h", "no scheme: write one first (registered: "},
		{"redis://h:99999/0", "port 99999 is out of range: want 1 to 65535"},
		{"redis://h:0", "port 0 is out of range"},
		{"redis://h:abc/0", "the port (after the host's ':') is not a number from 1 to 65535"},
		{"redis://u:" + secret, "if this is user:password, add @HOST after it"},
		{"redis://h%zz/", "invalid percent-escape at character 10: '%' must be followed by two hex digits"},
		{"redis://h h", `invalid character " " in the host at character 10`},
		{"redis://h\n", "control character (newline, tab, ...) at character 10"},
		{"redis://[::1", "invalid IPv6 host"},
	}
	for _, c := range cases {
		_, err := relay.ParseURL(c.raw)
		var ue *relay.URLError
		if !errors.As(err, &ue) {
			t.Errorf("ParseURL(%q) = %v, want a *relay.URLError", c.raw, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseURL(%q) = %v\nwant it to contain %s", c.raw, err, c.want)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("ParseURL(%q) leaks the password: %v", c.raw, err)
		}
		// Opening and checking say the same.
		if err := relay.CheckURL(c.raw); err == nil || err.Error() != ue.Error() {
			t.Errorf("CheckURL(%q) = %v, want %v", c.raw, err, ue)
		}
	}
}

func TestParseURLAccepts(t *testing.T) {
	for _, raw := range []string{
		"redis://u:p%23w%2F%3F%20%25@h:6379/0",     // percent-encoded reserved characters
		"redis://u:p@ss@h:6379/0",                  // '@' in a password is read as meant
		"kafka://h:9092?sasl_user=me@corp.example", // '@' in a query value
		"sqs://?region=r&endpoint=http://u:p@h:4566",
		"mem://name",
		"redis://h:65535",
	} {
		if _, err := relay.ParseURL(raw); err != nil {
			t.Errorf("ParseURL(%q): %v", raw, err)
		}
	}
	u, err := relay.ParseURL("redis://u:p%23w@h:6379/0")
	if pw, _ := u.User.Password(); err != nil || pw != "p#w" || u.Host != "h:6379" {
		t.Errorf("encoded password parsed as %v %q, %v", u, pw, err)
	}
}

// Redact hides a password even when its reserved characters make the URL
// parse into something else.
func TestRedactReservedPassword(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:Pw#Secret@h:6379/0": "redis://u:xxxxx@h:6379/0",
		"redis://u:12#Secret@h":        "redis://u:xxxxx@h",
		"redis://u:Pw/Secret@h:1/0":    "redis://u:xxxxx@h:1/0",
	} {
		if got := relay.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
