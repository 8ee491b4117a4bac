package relay

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Opener opens publishers and subscribers for the URL schemes it registered.
// The ctx bounds connecting only; the connection lives until Close. An
// unknown query parameter must be reported as a *URLError naming it.
type Opener interface {
	OpenPublisher(ctx context.Context, u *url.URL) (Publisher, error)
	OpenSubscriber(ctx context.Context, u *url.URL) (Subscriber, error)
}

// URLChecker is implemented by Openers that can check a URL without
// connecting. Both methods read every query parameter of both sides with
// the parser the opener's OpenPublisher and OpenSubscriber use, touch no
// network, and report each problem as a *URLError (joined when there are
// several) naming its parameter where there is one.
type URLChecker interface {
	// CheckURL reports every problem OpenPublisher would report for u
	// before connecting.
	CheckURL(u *url.URL) error
	// CheckSubscriberURL reports every problem OpenSubscriber would report
	// for u before connecting: CheckURL's and what only a subscriber needs,
	// such as a group where the scheme requires one.
	CheckSubscriberURL(u *url.URL) error
}

var registry struct {
	sync.RWMutex
	openers map[string]Opener
}

// Register makes an adapter available under scheme. It panics if the scheme
// is registered twice or o is nil, like database/sql.Register. Adapters call
// it from init.
func Register(scheme string, o Opener) {
	scheme = strings.ToLower(scheme)
	registry.Lock()
	defer registry.Unlock()
	if o == nil {
		panic("relay: Register opener is nil for " + scheme)
	}
	if registry.openers == nil {
		registry.openers = make(map[string]Opener)
	}
	if _, dup := registry.openers[scheme]; dup {
		panic("relay: Register called twice for scheme " + scheme)
	}
	registry.openers[scheme] = o
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	s := make([]string, 0, len(registry.openers))
	for k := range registry.openers {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// noScheme explains a URL without a scheme, listing the registered ones
// (so that the list is this program's, and never stale).
func noScheme() string {
	schemes := Schemes()
	if len(schemes) == 0 {
		return "no scheme: write one first, e.g. mem://NAME (no adapter is registered: import one, " +
			`e.g. _ "github.com/go-relay/relay/adapters/memory")`
	}
	return "no scheme: write one first (registered: " + strings.Join(schemes, "://, ") + "://)"
}

func opener(raw string) (Opener, *url.URL, error) {
	u, err := ParseURL(raw)
	if err != nil {
		return nil, nil, err
	}
	o := lookup(u.Scheme)
	if o == nil {
		return nil, nil, fmt.Errorf("%w %q (registered: %s; did you import the adapter package?)",
			ErrUnknownScheme, u.Scheme, strings.Join(Schemes(), ", "))
	}
	return o, u, nil
}

// CheckURL reports, without connecting, whether raw can open a publisher:
// a URL that does not parse or has no scheme is a *URLError, a scheme no
// imported adapter registered is ErrUnknownScheme, and the adapter checks
// every query parameter (of both sides, see URLChecker) when it implements
// URLChecker; all adapters of this module do. For other adapters only the
// scheme is checked.
func CheckURL(raw string) error {
	o, u, err := opener(raw)
	if err != nil {
		return err
	}
	if c, ok := o.(URLChecker); ok {
		return c.CheckURL(u)
	}
	return nil
}

// CheckSubscriberURL is CheckURL for a subscriber: it also reports what
// only a subscriber needs, such as a missing group=.
func CheckSubscriberURL(raw string) error {
	o, u, err := opener(raw)
	if err != nil {
		return err
	}
	if c, ok := o.(URLChecker); ok {
		return c.CheckSubscriberURL(u)
	}
	return nil
}

// OpenPublisher opens a Publisher for url with the adapter registered for
// its scheme. ctx bounds connecting only.
func OpenPublisher(ctx context.Context, url string) (Publisher, error) {
	o, u, err := opener(url)
	if err != nil {
		return nil, err
	}
	return o.OpenPublisher(ctx, u)
}

// OpenSubscriber opens a Subscriber for url with the adapter registered for
// its scheme. The group is given as ?group=NAME. ctx bounds connecting only.
func OpenSubscriber(ctx context.Context, url string) (Subscriber, error) {
	o, u, err := opener(url)
	if err != nil {
		return nil, err
	}
	return o.OpenSubscriber(ctx, u)
}

func lookup(scheme string) Opener {
	registry.RLock()
	defer registry.RUnlock()
	return registry.openers[strings.ToLower(scheme)]
}

// ParseURL parses raw as OpenPublisher, OpenSubscriber and CheckURL do
// before looking up the scheme's adapter. It is url.Parse with errors that
// say what is wrong without quoting any part of the URL that may be a
// secret: a *URLError whose Reason names the problem and, where known, its
// position (1-based byte offset). It also catches what url.Parse lets
// through: a user info holding a reserved character (the URL would parse
// into another host, path or fragment), a missing scheme, "host:port"
// without a scheme (which url.Parse reads as scheme "host") and a port
// outside 1..65535.
func ParseURL(raw string) (*url.URL, error) {
	bad := func(reason string) error { return &URLError{URL: Redact(raw), Reason: reason} }
	u, err := url.Parse(raw)
	if reason := misreadUserinfo(raw, u, err); reason != "" {
		return nil, bad(reason)
	}
	if err != nil {
		return nil, bad(parseReason(raw, err))
	}
	if u.Scheme == "" {
		return nil, bad(noScheme())
	}
	if lookup(u.Scheme) == nil && looksLikeHostPort(u) {
		return nil, bad(hostPortNoScheme)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, bad(fmt.Sprintf("port %s is out of range: want 1 to 65535", p))
		}
	}
	return u, nil
}

const hostPortNoScheme = "no scheme: this looks like host:port; write the scheme first, e.g. redis://HOST:PORT or kafka://HOST:PORT"

// looksLikeHostPort reports whether u is "host:port" parsed as scheme
// "host" with the port as opaque data (url.Parse("localhost:6379")).
func looksLikeHostPort(u *url.URL) bool {
	port, _, _ := strings.Cut(u.Opaque, "/")
	if port == "" || u.Host != "" {
		return false
	}
	for _, r := range port {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// misreadUserinfo explains a user info that url.Parse rejected or misread
// because its password holds reserved characters, given url.Parse's
// result for raw; "" when there is none. A URL in which url.Parse found a
// user info followed by a plain host is taken as parsed.
func misreadUserinfo(raw string, u *url.URL, err error) string {
	if err == nil && u.User != nil && plainHost(u.Host) {
		return ""
	}
	start, at := userinfoSpan(raw)
	if start < 0 {
		return ""
	}
	return userinfoReason(raw[start:at])
}

// userinfoSpan finds the user info of raw holding a password: raw[start:at]
// is "user:password" and raw[at] the '@' that ends it. It takes the last
// '@' that is not inside a query value (the text before it has no '=' or
// '&') and is followed by a plain host[:port], since a password may hold
// '@', '/', '?' or '#'. start is -1 when raw has no such user info.
func userinfoSpan(raw string) (start, at int) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return -1, -1
	}
	start = i + 3
	rest := raw[start:]
	for a := strings.LastIndexByte(rest, '@'); a >= 0; a = strings.LastIndexByte(rest[:a], '@') {
		cand := rest[:a]
		if strings.ContainsAny(cand, "=&") || !plainHost(rest[a+1:]) {
			continue
		}
		if !strings.Contains(cand, ":") {
			return -1, -1
		}
		return start, start + a
	}
	return -1, -1
}

// userinfoReason explains the reserved characters in userinfo that make
// url.Parse misread or reject it, with their percent-encoded forms, or
// returns "". It never quotes the user info itself.
func userinfoReason(userinfo string) string {
	var found []string
	seen := map[byte]bool{}
	serious := false
	for i := 0; i < len(userinfo); i++ {
		c := userinfo[i]
		switch c {
		case '%':
			if i+2 < len(userinfo) && isHex(userinfo[i+1]) && isHex(userinfo[i+2]) {
				continue
			}
		case '#', '/', '?', ' ', '@':
		default:
			continue
		}
		if c != '@' {
			serious = true
		}
		if !seen[c] {
			seen[c] = true
			found = append(found, fmt.Sprintf("%q as %%%02X", string(c), c))
		}
	}
	if !serious {
		return "" // url.Parse takes '@' in a user info as it is
	}
	return "the user info (user:password@) holds reserved characters: passwords and user names must be percent-encoded; write " +
		strings.Join(found, ", ")
}

// plainHost reports whether s starts with a host name or bracketed IP
// address, an optional numeric port, then the end or one of "/?#".
func plainHost(s string) bool {
	end := strings.IndexAny(s, "/?#")
	if end < 0 {
		end = len(s)
	}
	h := s[:end]
	if strings.HasPrefix(h, "[") {
		i := strings.IndexByte(h, ']')
		if i < 0 {
			return false
		}
		h = "x" + h[i+1:]
	}
	host, port, hasPort := strings.Cut(h, ":")
	if host == "" || hasPort && port == "" {
		return false
	}
	for _, r := range host {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	for _, r := range port {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// parseReason rebuilds url.Parse's reason for err without the URL text
// that url.Error and some of its causes quote, adding the position where
// it can be found.
func parseReason(raw string, err error) string {
	inner := err
	var ue *url.Error
	if errors.As(err, &ue) {
		inner = ue.Err
	}
	at := func(i int) string {
		if i < 0 {
			return ""
		}
		return fmt.Sprintf(" at character %d", i+1)
	}
	var esc url.EscapeError
	var host url.InvalidHostError
	switch msg := inner.Error(); {
	case errors.As(inner, &esc):
		return "cannot parse: invalid percent-escape" + at(strings.Index(raw, string(esc))) +
			": '%' must be followed by two hex digits (write a literal '%' as %25)"
	case errors.As(inner, &host):
		return fmt.Sprintf("cannot parse: invalid character %q in the host%s", string(host), at(strings.Index(raw, string(host))))
	case strings.HasPrefix(msg, "invalid port"):
		return "cannot parse: the port (after the host's ':') is not a number from 1 to 65535; " +
			"if this is user:password, add @HOST after it, and percent-encode reserved characters in it"
	case msg == "missing protocol scheme":
		return noScheme()
	case msg == "first path segment in URL cannot contain colon":
		return hostPortNoScheme
	case strings.Contains(msg, "invalid control character"):
		return "cannot parse: a control character (newline, tab, ...)" + at(strings.IndexFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f })) + " must be percent-encoded or removed"
	case strings.Contains(msg, "invalid userinfo"):
		return "cannot parse: the user info (user:password@) holds a character that must be percent-encoded"
	case msg == "missing ']' in host", msg == "invalid IP-literal", strings.HasPrefix(msg, "invalid host"):
		return "cannot parse: invalid IPv6 host: write it in brackets, e.g. [::1]:6379"
	case msg == "empty url":
		return "empty URL"
	}
	return "cannot parse"
}

// secretWords mark query parameters whose values Redact hides: any
// parameter whose name contains one of them (case-insensitive), so that
// sasl_password, secret_key, session_token and a mistyped "?password" are
// all covered.
var secretWords = []string{"password", "secret", "token", "passwd", "pwd"}

// Redact returns raw with the password of its user info, the values of
// secret query parameters and any fragment replaced by "xxxxx". Query
// pairs that do not parse are dropped, since they may hold a secret.
// Unparseable input is replaced entirely, since it may hold a secret.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if misreadUserinfo(raw, u, err) != "" {
		// A password with reserved characters is misread as a host, path
		// or fragment: hide it and parse again.
		start, at := userinfoSpan(raw)
		user, _, _ := strings.Cut(raw[start:at], ":")
		u, err = url.Parse(raw[:start] + url.PathEscape(user) + ":xxxxx" + raw[at:])
	}
	if err != nil {
		return "<unparseable URL>"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if u.Fragment != "" || u.RawFragment != "" {
		// No adapter reads a fragment, but a '#' typed into a password or
		// a query value turns the rest of the URL into one.
		u.Fragment, u.RawFragment = "xxxxx", ""
	}
	// A '?' or '@' typed into a password can move the query, secrets
	// included, into the path or the host: hide any part that mentions
	// a secret rather than guess where it came from.
	if containsSecretWord(u.Path) || containsSecretWord(u.RawPath) {
		u.Path, u.RawPath = "/xxxxx", ""
	}
	if containsSecretWord(u.Opaque) {
		u.Opaque = "xxxxx"
	}
	if containsSecretWord(u.Host) {
		u.Host = "xxxxx"
	}
	if u.RawQuery != "" {
		q, perr := url.ParseQuery(u.RawQuery)
		changed := perr != nil
		for k, vs := range q {
			if !plainParamName(k) || containsSecretWord(k) || containsSecretWord(strings.Join(vs, "&")) {
				// A secret-sounding name, a value that looks like another
				// parameter ("=?sasl_password=..."), or a name that is not a
				// plain identifier: hide the value rather than guess.
				q[k] = []string{"xxxxx"}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

func containsSecretWord(s string) bool {
	s = strings.ToLower(s)
	for _, w := range secretWords {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// plainParamName reports whether k looks like an option name
// ([A-Za-z0-9_.-]+), as every adapter's options do.
func plainParamName(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}
