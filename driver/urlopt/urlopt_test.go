package urlopt

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

func TestParamsReadTypedValues(t *testing.T) {
	u, _ := url.Parse("x://h?group=g&n=5&d=250ms&b=true&e=fanout&seed=a&seed=b")
	p := New(u)
	if p.String("group", "") != "g" || p.Int("n", 1, 0) != 5 || p.Duration("d", 0) != 250*time.Millisecond ||
		!p.Bool("b", false) || p.Enum("e", "topic", "fanout", "topic") != "fanout" || len(p.Strings("seed")) != 2 {
		t.Fatal("values not read")
	}
	if p.Int("absent", 7, 0) != 7 {
		t.Fatal("default not used")
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestParamsReportEveryProblem(t *testing.T) {
	u, _ := url.Parse("x://user:pw@h?n=abc&d=-1s&b=maybe&e=nope&extra=1&group=a&group=b")
	p := New(u)
	p.Int("n", 0, 0)
	p.Duration("d", 0)
	p.Bool("b", false)
	p.Enum("e", "a", "a", "b")
	p.String("group", "")
	err := p.Err()
	for _, want := range []string{`"n"`, `"d"`, `"b"`, `"e"`, `"extra": unknown parameter`, `"group": given more than once`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %s", err, want)
		}
	}
	if !errors.Is(err, relay.ErrBadURL) {
		t.Error("not ErrBadURL")
	}
	if strings.Contains(err.Error(), "pw@") {
		t.Errorf("password in error: %v", err)
	}
	var ue *relay.URLError
	if !errors.As(err, &ue) {
		t.Error("no *relay.URLError inside")
	}
}

func TestIntMinimum(t *testing.T) {
	u, _ := url.Parse("x://h?inflight=0")
	p := New(u)
	p.Int("inflight", 64, 1)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("err = %v", err)
	}
}

// TestSizeTakesUnits: a size parameter reads plain byte counts and binary
// units alike, accepts "0" only where the minimum allows it, and names the
// parameter when the value is not a size.
func TestSizeTakesUnits(t *testing.T) {
	u, _ := url.Parse("x://h?a=16MiB&b=1048576&c=512KiB&z=0")
	p := New(u)
	if got := p.Size("a", 1, 1); got != 16<<20 {
		t.Errorf("a = %d; want %d", got, 16<<20)
	}
	if got := p.Size("b", 1, 1); got != 1<<20 {
		t.Errorf("b = %d; want %d", got, 1<<20)
	}
	if got := p.Size("c", 1, 1); got != 512<<10 {
		t.Errorf("c = %d; want %d", got, 512<<10)
	}
	if got := p.Size("z", 9, 0); got != 0 {
		t.Errorf("z = %d; want 0", got)
	}
	if got := p.Size("absent", 7, 1); got != 7 {
		t.Errorf("absent = %d; want the default 7", got)
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"max_bytes=0", "max_bytes=12XB", "max_bytes=-5", "max_bytes=100"} {
		u, _ := url.Parse("x://h?" + q)
		p := New(u)
		p.Size("max_bytes", 1<<20, 1024)
		err := p.Err()
		if err == nil || !errors.Is(err, relay.ErrBadURL) || !strings.Contains(err.Error(), `"max_bytes"`) {
			t.Errorf("%s: err = %v; want a bad URL naming max_bytes", q, err)
		}
	}
}

// An unknown parameter close to one the adapter read is reported with it;
// one close to nothing is reported plainly.
func TestUnknownParameterSuggestion(t *testing.T) {
	u, _ := url.Parse("x://h?inflite=8&group=g&zzz=1")
	p := New(u)
	p.Int("inflight", 64, 1)
	p.Size("inflight_bytes", 0, 0)
	p.String("group", "")
	err := p.Err()
	if err == nil {
		t.Fatal("no error for unknown parameters")
	}
	for _, want := range []string{
		`parameter "inflite": unknown parameter (did you mean "inflight"?)`,
		`parameter "zzz": unknown parameter`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %s", err, want)
		}
	}
	if strings.Contains(err.Error(), `"zzz": unknown parameter (`) {
		t.Errorf("error %q suggests something for zzz", err)
	}
}

func TestAddress(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://":                "127.0.0.1:6379",
		"redis://:7000":           "127.0.0.1:7000",
		"redis://cache":           "cache:6379",
		"redis://cache:7000/0":    "cache:7000",
		"redis://u:p@[::1]/0":     "[::1]:6379",
		"redis://u:p@[::1]:7000/": "[::1]:7000",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := Address(u, "6379"); got != want {
			t.Errorf("Address(%s) = %q, want %q", raw, got, want)
		}
	}
}

func TestGroup(t *testing.T) {
	u, _ := url.Parse("x://h?a=1")
	p := New(u)
	if g := p.Group(false); g != "" {
		t.Fatalf("Group = %q", g)
	}
	if p.Has("a"); p.Err() != nil {
		t.Fatalf("a publisher needs no group: %v", p.Err())
	}
	p = New(u)
	p.Has("a")
	p.Group(true)
	var ue *relay.URLError
	if err := p.Err(); !errors.As(err, &ue) || ue.Param != "group" || !strings.Contains(ue.Reason, "required") {
		t.Fatalf("subscriber without a group: %v", err)
	}
	u, _ = url.Parse("x://h?group=g")
	if g := New(u).Group(true); g != "g" {
		t.Fatalf("Group = %q", g)
	}
}
