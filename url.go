package relay

import (
	"context"
	"fmt"
	"net/url"
	"sort"
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

func opener(raw string) (Opener, *url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, &URLError{URL: Redact(raw), Reason: "cannot parse"}
	}
	if u.Scheme == "" {
		return nil, nil, &URLError{URL: Redact(raw), Reason: "no scheme (want e.g. mem://, amqp://, kafka://, redis://, sqs://, sns://)"}
	}
	registry.RLock()
	o := registry.openers[strings.ToLower(u.Scheme)]
	registry.RUnlock()
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
