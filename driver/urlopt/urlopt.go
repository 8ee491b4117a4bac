// Package urlopt reads adapter options from URL query parameters strictly:
// every parameter must be read by the adapter, otherwise Err reports it as
// unknown, and malformed values are reported with the parameter's name.
package urlopt

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/suggest"
)

// Params is a one-shot reader over a URL's query. Not safe for concurrent use.
type Params struct {
	u    *url.URL
	q    url.Values
	used map[string]bool
	errs []error
}

// New starts reading u's query parameters.
func New(u *url.URL) *Params {
	return &Params{u: u, q: u.Query(), used: map[string]bool{}}
}

func (p *Params) fail(name, reason string) {
	p.errs = append(p.errs, &relay.URLError{URL: relay.Redact(p.u.String()), Param: name, Reason: reason})
}

// Fail records a problem with parameter name (for adapter-level checks).
func (p *Params) Fail(name, format string, args ...any) { p.fail(name, fmt.Sprintf(format, args...)) }

// Has reports whether name was given, and marks it read.
func (p *Params) Has(name string) bool {
	p.used[name] = true
	_, ok := p.q[name]
	return ok
}

func (p *Params) one(name string) (string, bool) {
	p.used[name] = true
	vs, ok := p.q[name]
	if !ok {
		return "", false
	}
	if len(vs) > 1 {
		p.fail(name, "given more than once")
	}
	return vs[0], true
}

// String returns the value of name, or def when absent.
func (p *Params) String(name, def string) string {
	if v, ok := p.one(name); ok {
		return v
	}
	return def
}

// Strings returns every value of a repeatable parameter.
func (p *Params) Strings(name string) []string {
	p.used[name] = true
	return p.q[name]
}

// Int returns the integer value of name, or def; min bounds it from below.
func (p *Params) Int(name string, def, min int) int {
	v, ok := p.one(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		p.fail(name, fmt.Sprintf("%q is not an integer", v))
		return def
	}
	if n < min {
		p.fail(name, fmt.Sprintf("%d is below the minimum %d", n, min))
		return def
	}
	return n
}

// Duration returns a duration like "1.5s" or "250ms", or def.
func (p *Params) Duration(name string, def time.Duration) time.Duration {
	v, ok := p.one(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		p.fail(name, fmt.Sprintf("%q is not a non-negative duration such as 500ms or 2s", v))
		return def
	}
	return d
}

// Bool returns a boolean (true/false/1/0), or def.
func (p *Params) Bool(name string, def bool) bool {
	v, ok := p.one(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, fmt.Sprintf("%q is not a boolean (true or false)", v))
		return def
	}
	return b
}

// Enum returns one of allowed, or def.
func (p *Params) Enum(name, def string, allowed ...string) string {
	v, ok := p.one(name)
	if !ok {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	p.fail(name, fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", ")))
	return def
}

// Err reports every malformed value and every parameter that was never
// read (unknown to the adapter), or nil. An unknown parameter that is
// probably a typo of one the adapter read is reported with it:
// `unknown parameter (did you mean "inflight"?)`.
func (p *Params) Err() error {
	var unknown, known []string
	for k := range p.q {
		if !p.used[k] {
			unknown = append(unknown, k)
		}
	}
	for k := range p.used {
		known = append(known, k)
	}
	sort.Strings(unknown)
	sort.Strings(known) // equally close names: the first in order wins
	errs := append([]error(nil), p.errs...)
	for _, k := range unknown {
		reason := "unknown parameter"
		if s := suggest.Closest(k, known); s != "" {
			reason += fmt.Sprintf(" (did you mean %q?)", s)
		}
		errs = append(errs, &relay.URLError{URL: relay.Redact(p.u.String()), Param: k, Reason: reason})
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// Size is Int for a size in bytes: it also takes a binary unit, as Bytes
// does ("1048576", "512KiB", "16MiB"), so that every *bytes parameter
// reads the same way; min bounds it from below ("0" is accepted when min
// is 0).
func (p *Params) Size(name string, def, min int) int {
	v, ok := p.one(name)
	if !ok {
		return def
	}
	if strings.TrimSpace(v) == "0" && min <= 0 {
		return 0
	}
	n, err := driver.ParseBytes(v)
	if err != nil {
		p.fail(name, err.Error())
		return def
	}
	if int(n) < min {
		p.fail(name, fmt.Sprintf("%d is below the minimum %d", n, min))
		return def
	}
	return int(n)
}

// Bytes returns a byte count like "1048576", "512KiB", "64MiB" or "1GiB"
// (binary units; "B" for bytes is allowed), or def. Zero and negative
// counts are refused: a parameter given means a bound.
func (p *Params) Bytes(name string, def int64) int64 {
	v, ok := p.one(name)
	if !ok {
		return def
	}
	n, err := driver.ParseBytes(v)
	if err != nil {
		p.fail(name, err.Error())
		return def
	}
	return n
}

// Address is the host:port u names, with host 127.0.0.1 when u has none
// and defaultPort when u gives no port: the broker address of a URL such
// as redis://:6379 or nats://broker.
func Address(u *url.URL, defaultPort string) string {
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = defaultPort
	}
	return net.JoinHostPort(host, port)
}

// Group returns the value of group=, the subscriber's group, and for a
// subscriber (subscriber true) reports it missing as driver.GroupRequired.
func (p *Params) Group(subscriber bool) string {
	g := p.String("group", "")
	if subscriber && g == "" {
		p.Fail("group", "%s", driver.GroupRequired)
	}
	return g
}
