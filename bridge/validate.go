package bridge

// Validation of a Config: every problem at once, each with its field path.

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
)

// Validate reports every problem of c at once as a *ConfigError (nil when
// c is valid). Problems name the field path and, for a parsed config, the
// file position. URL schemes must be registered (the adapter imported),
// and every endpoint URL is checked by its adapter (relay.CheckURL; for
// sources relay.CheckSubscriberURL, with the group): unknown parameters,
// malformed values. It does not connect to anything; see Check.
func (c Config) Validate() error {
	p := newProblems(c.file, c.pos)
	c.validate(p)
	return p.err()
}

func (c Config) validate(p *problems) {
	if c.Name != "" && !nameRE.MatchString(c.Name) {
		p.add("name", "%q: use letters, digits, '.', '_' and '-'", c.Name)
	}
	if c.Log.Level != "" && !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		p.add("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	if c.Log.Format != "" && c.Log.Format != "text" && c.Log.Format != "json" {
		p.add("log.format", "%q: want text or json", c.Log.Format)
	}
	if c.HTTP.Address != "" {
		if _, port, err := net.SplitHostPort(c.HTTP.Address); err != nil || port == "" {
			p.add("http.address", "%q: want host:port, e.g. 127.0.0.1:9470 or :9470", c.HTTP.Address)
		}
	}
	if c.HTTP.Profiling && c.HTTP.Disabled {
		p.add("http.profiling", "true needs the HTTP endpoint, which http.disabled (or --http off) turns off")
	}
	if c.ShutdownTimeout < 0 {
		p.add("shutdown_timeout", "%v: must not be negative", c.ShutdownTimeout)
	}
	if len(c.Routes) == 0 {
		p.add("routes", "at least one route is required")
	}
	names := map[string]string{}
	for i, r := range c.Routes {
		path := "routes[" + strconv.Itoa(i) + "]"
		r.validate(p, path)
		if r.Name != "" {
			if prev, dup := names[r.Name]; dup {
				p.add(path+".name", "%q is already the name of %s", r.Name, prev)
			} else {
				names[r.Name] = path
			}
		}
	}
}

func (r Route) validate(p *problems, path string) {
	switch {
	case r.Name == "":
		p.add(path+".name", "required")
	case !nameRE.MatchString(r.Name):
		p.add(path+".name", "%q: use letters, digits, '.', '_' and '-'", r.Name)
	}
	src := path + ".from"
	checkURL(p, src+".url", r.From.URL)
	if r.From.Topic == "" {
		p.add(src+".topic", "required")
	}
	if u, err := url.Parse(r.From.URL); err == nil && r.From.URL != "" {
		urlGroup := u.Query().Get("group")
		switch {
		case noGroup(r.From.URL):
			if r.From.Group != "" || urlGroup != "" {
				p.add(src+".group", "not used with %s (the queue is the unit of competing consumers); use sns:// to give each group its own queue", schemeOf(r.From.URL))
			}
		case r.From.Group == "" && urlGroup == "":
			p.add(src+".group", "required (or group= in the URL): bridges in one group share the work")
		case r.From.Group != "" && urlGroup != "" && r.From.Group != urlGroup:
			p.add(src+".group", "%q differs from group=%q in the URL", r.From.Group, urlGroup)
		}
	}
	// The source as the route opens it (group= and inflight= added), with
	// the adapter's own parser: parameters, values and its group rules.
	// Group problems go to from.group unless the URL's group= is at fault,
	// and are left out when the bridge reported one there already; an
	// inflight= the bridge added goes to from.inflight.
	checkAdapterURL(p, src+".url", r.Name, r.From.URL, sourceURL(r.From), func(param string) string {
		if param == "inflight" && r.From.InFlight > 0 && !strings.Contains(r.From.URL, "inflight=") {
			return src + ".inflight"
		}
		if param == "inflight_bytes" && r.From.InFlightBytes > 0 && !strings.Contains(r.From.URL, "inflight_bytes=") {
			return src + ".inflight_bytes"
		}
		if param != "group" {
			return src + ".url"
		}
		if p.bad[src+".group"] {
			return ""
		}
		if r.From.Group != "" || !strings.Contains(r.From.URL, "group=") {
			return src + ".group"
		}
		return src + ".url"
	})
	dst := path + ".to"
	checkURL(p, dst+".url", r.To.URL)
	checkAdapterURL(p, dst+".url", r.Name, r.To.URL, "", nil)
	toTopic := r.To.Topic
	if toTopic == "" {
		toTopic = r.From.Topic
	}
	if r.From.URL != "" && r.To.URL != "" && r.From.Topic != "" &&
		sourceHopID(r.From) == destHopID(Destination{URL: r.To.URL, Topic: toTopic, ID: r.To.ID}) {
		p.add(dst, "route forwards %s to itself", r.From.Topic)
	}
	if r.From.InFlight < 0 {
		p.add(src+".inflight", "%d: must be at least 1", r.From.InFlight)
	}
	if r.From.InFlightBytes < 0 {
		p.add(src+".inflight_bytes", "%d: must be at least 1", r.From.InFlightBytes)
	}
	if r.Concurrency < 0 || r.Concurrency > MaxConcurrency {
		p.add(path+".concurrency", "%d: want 1 to %d", r.Concurrency, MaxConcurrency)
	}
	if r.Batch < 0 {
		p.add(path+".batch", "%d: must be at least 1", r.Batch)
	}
	if r.PublishTimeout < 0 {
		p.add(path+".publish_timeout", "%v: must not be negative", r.PublishTimeout)
	}
	r.validateGuarantee(p, path)
	if r.CaughtUpAfter < 0 {
		p.add(path+".caught_up_after", "%v: must not be negative", r.CaughtUpAfter)
	}
	if r.StopWhen != "" && r.StopWhen != StopWhenDrained {
		p.add(path+".stop_when", "%q: want %q (or leave it out)", r.StopWhen, StopWhenDrained)
	}
	if rt := r.Retry; rt != nil {
		if rt.MaxAttempts < 0 {
			p.add(path+".retry.max_attempts", "%d: must be at least 1", rt.MaxAttempts)
		}
		if rt.InitialInterval < 0 {
			p.add(path+".retry.initial_interval", "%v: must not be negative", rt.InitialInterval)
		}
		if rt.MaxInterval < 0 {
			p.add(path+".retry.max_interval", "%v: must not be negative", rt.MaxInterval)
		} else if rt.MaxInterval > 0 && rt.MaxInterval < rt.InitialInterval {
			p.add(path+".retry.max_interval", "%v is less than initial_interval %v", rt.MaxInterval, rt.InitialInterval)
		}
		if rt.MaxElapsed < 0 {
			p.add(path+".retry.max_elapsed", "%v: must not be negative", rt.MaxElapsed)
		}
	}
	if ps := r.Poison; ps != nil {
		if ps.Topic == "" {
			p.add(path+".poison.topic", "required")
		}
		if ps.URL != "" {
			checkURL(p, path+".poison.url", ps.URL)
			checkAdapterURL(p, path+".poison.url", r.Name, ps.URL, "", nil)
		} else if _, ok := sourceAsPublisherURL(r.From.URL); !ok && r.From.URL != "" {
			p.add(path+".poison.url", "required: from.url has parameters other than group=, which a publisher of its scheme may not accept")
		}
		if ps.AfterDeliveries < 0 {
			p.add(path+".poison.after_deliveries", "%d: must not be negative", ps.AfterDeliveries)
		}
		if ps.Topic != "" && (ps.Topic == r.From.Topic && (ps.URL == "" || ps.URL == r.From.URL)) {
			p.add(path+".poison.topic", "%q is the route's source topic", ps.Topic)
		}
	}
	if d := r.Dedup; d != nil {
		if d.Store != "" && d.Store != "memory" {
			if _, err := redis.ParseURL(d.Store); err != nil {
				p.add(path+".dedup.store", "%s: want memory or a redis:// URL (%v)", relay.Redact(d.Store), err)
			}
		}
		if d.TTL < 0 {
			p.add(path+".dedup.ttl", "%v: must not be negative", d.TTL)
		}
	}
}

// checkURL reports a missing, unparseable (relay.ParseURL says why) or
// unregistered URL. Values are redacted in messages.
func checkURL(p *problems, path, raw string) {
	if raw == "" {
		p.add(path, "required")
		return
	}
	u, err := relay.ParseURL(raw)
	if err != nil {
		var ue *relay.URLError
		if errors.As(err, &ue) {
			p.add(path, "%s: %s", ue.URL, ue.Reason)
		} else {
			p.add(path, "%s: cannot parse URL", relay.Redact(raw))
		}
		return
	}
	if !slices.Contains(relay.Schemes(), strings.ToLower(u.Scheme)) {
		p.add(path, "unknown URL scheme %q (this binary has: %s)", u.Scheme, strings.Join(relay.Schemes(), ", "))
	}
}

// checkAdapterURL reports the problems the adapter of raw finds in it
// without connecting (relay.CheckURL; relay.CheckSubscriberURL when
// subURL, the URL the route subscribes with, is given). Each problem names
// the route and the parameter; where maps a parameter to the field path to
// report it at ("" drops it), nil meaning path. Missing, unparseable and
// unknown-scheme URLs are left to checkURL.
func checkAdapterURL(p *problems, path, route, raw, subURL string, where func(param string) string) {
	if raw == "" || p.bad[path] {
		return
	}
	var err error
	if subURL != "" {
		err = relay.CheckSubscriberURL(subURL)
	} else {
		err = relay.CheckURL(raw)
	}
	for _, e := range flatten(err) {
		at, msg := path, e.Error()
		var ue *relay.URLError
		if errors.As(e, &ue) {
			msg = ue.Reason
			if ue.Param != "" {
				msg = fmt.Sprintf("parameter %q: %s", ue.Param, ue.Reason)
				if where != nil {
					at = where(ue.Param)
				}
			}
		}
		if at == "" {
			continue
		}
		p.at(p.lookup(at), at, "route %q: %s", route, msg)
	}
}

// flatten lists the errors joined in err (none for nil).
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// sourceAsPublisherURL returns the source URL without group=; ok is false
// when other query parameters remain and the scheme's adapter does not
// declare that its URLs take both sides' parameters on either side
// (relay.URLDefaults.EitherSide).
func sourceAsPublisherURL(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return raw, false
	}
	q := u.Query()
	q.Del("group")
	if d, _ := relay.DefaultsOf(raw); len(q) > 0 && !d.EitherSide {
		return raw, false
	}
	if len(q) == 0 {
		u.RawQuery = ""
		u.ForceQuery = false
		return u.String(), true
	}
	return withQuery(raw, func(v url.Values) { v.Del("group") }), true
}

// validateGuarantee refuses a guarantee the route cannot give and the
// settings an at-most-once route contradicts (see Route.Guarantee).
func (r Route) validateGuarantee(p *problems, path string) {
	switch r.Guarantee {
	case relay.AtLeastOnce:
	case relay.AtMostOnce:
		if r.Retry != nil {
			p.add(path+".retry", "route %q is at-most-once: its source is acked before the publish, which is tried once; "+
				"remove retry or use guarantee: at-least-once", r.Name)
		}
		if r.Poison != nil {
			p.add(path+".poison", "route %q is at-most-once: a failed publish is lost, not kept for another try; "+
				"remove poison or use guarantee: at-least-once", r.Name)
		}
	case relay.ExactlyOnce:
		src := sourceURL(r.From)
		if relay.CheckSubscriberURL(src) != nil || relay.CheckURL(r.To.URL) != nil {
			return // the URL problems are reported on their own
		}
		if err := relay.CheckExactlyOnce(src, r.To.URL); err != nil {
			var why []string
			for _, e := range flatten(err) {
				if e != relay.ErrBadURL {
					why = append(why, e.Error())
				}
			}
			p.add(path+".guarantee", "exactly-once is not available for route %q (%s to %s): %s; "+
				"or use at-least-once with dedup for an exactly-once effect",
				r.Name, schemeOf(r.From.URL), schemeOf(r.To.URL), strings.Join(why, "; "))
		}
	default:
		p.add(path+".guarantee", "unknown %v", r.Guarantee)
	}
}

// noGroup reports whether raw's adapter declares that its subscribers take
// no group (relay.URLDefaults.NoGroup: sqs://).
func noGroup(raw string) bool {
	d, _ := relay.DefaultsOf(raw)
	return d.NoGroup
}

// schemeOf names the backend of a URL by its scheme ("kafka://"), or
// "an unparsed URL".
func schemeOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		return u.Scheme + "://"
	}
	return "an unparsed URL"
}
