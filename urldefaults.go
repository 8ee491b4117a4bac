package relay

// URLDefaults is what an adapter declares about the URLs of its schemes
// for tools that build or read them (the bridge, the CLI), without
// connecting: the tools ask the adapter instead of knowing schemes.
type URLDefaults struct {
	// SourceWindow is the inflight= a bridge route's source URL gets when
	// the route sets no window (0: none is added, the adapter's own
	// default holds). A positive value says that the scheme's subscriber
	// URLs take inflight= and inflight_bytes=.
	SourceWindow int
	// SourceParams are query parameters a bridge route adds to its source
	// URL unless the URL has them: settings that suit a consumer which
	// only forwards what it reads (kafka://: share_payloads=true).
	SourceParams map[string]string
	// EitherSide: a URL of the scheme accepts the parameters of both
	// sides on either side, so that a subscriber URL without its group=
	// opens a publisher of the same broker.
	EitherSide bool
	// NoGroup: subscribers take no group= (the queue itself is the unit
	// of competing consumers: sqs://).
	NoGroup bool
	// InProcess: messages live inside one process and vanish with it
	// (mem://), so another process cannot share them.
	InProcess bool
}

// URLDefaulter is optionally implemented by an Opener that declares
// URLDefaults for its schemes.
type URLDefaulter interface {
	URLDefaults() URLDefaults
}

// DefaultsOf returns what the adapter registered for raw's scheme declares
// (see URLDefaults), and false when raw does not parse, no adapter
// registered its scheme, or the adapter declares nothing.
func DefaultsOf(raw string) (URLDefaults, bool) {
	o, _, err := opener(raw)
	if err != nil {
		return URLDefaults{}, false
	}
	d, ok := o.(URLDefaulter)
	if !ok {
		return URLDefaults{}, false
	}
	return d.URLDefaults(), true
}
