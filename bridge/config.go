package bridge

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
)

// Defaults of Config fields left zero.
const (
	DefaultHTTPAddress     = "127.0.0.1:9470"
	DefaultShutdownTimeout = 30 * time.Second
	DefaultConcurrency     = 512
	DefaultSourceInFlight  = 1024
	// DefaultSourceInFlightAMQP is the window of amqp:// sources: RabbitMQ
	// pushes up to the prefetch count of messages whatever their size (it
	// has no prefetch in bytes), so there the window bounds memory by
	// count alone.
	DefaultSourceInFlightAMQP = 256
	DefaultBatch              = 100
	MaxConcurrency            = 4096
	DefaultPublishTimeout     = 30 * time.Second
	DefaultLogLevel           = "info"
	DefaultLogFormat          = "text"
	DefaultSummaryInterval    = 30 * time.Second
	DefaultDedupTTL           = 24 * time.Hour
	DefaultRetryAttempts      = 5
	DefaultRetryInitial       = 100 * time.Millisecond
	DefaultRetryMax           = 10 * time.Second
)

// Config is a bridge: a set of routes plus how the daemon runs. The YAML
// form (see Parse and docs/bridge.md) uses the snake_case names given in
// the field comments. Build it in Go or with Parse/Load; call Validate (Parse
// does) before New.
type Config struct {
	// Name labels the bridge in logs ("name"). Default "relay-bridge".
	Name string
	// Log configures logging ("log").
	Log LogConfig
	// HTTP configures the operations endpoint ("http").
	HTTP HTTPConfig
	// ShutdownTimeout bounds the drain on SIGTERM: messages in flight get
	// this long to reach their destination ("shutdown_timeout"). Default 30s.
	ShutdownTimeout time.Duration
	// Routes are forwarded independently, each by its own subscription
	// ("routes"). At least one.
	Routes []Route

	pos  map[string]Pos // field path → position, set by Parse
	file string
}

// LogConfig configures the daemon's log output (on stderr).
type LogConfig struct {
	// Level is debug, info, warn or error ("level"). Default info.
	Level string
	// Format is text or json ("format"). Default text.
	Format string
	// SummaryInterval is how often Run logs one "route summary" line per
	// route (state, forwarded, rate, in flight, lag, retries, poisoned,
	// last error; see Status) at info level ("summary_interval").
	// Default 30s; negative disables the lines (in YAML: 0 or off, see
	// ParseSummaryInterval).
	SummaryInterval time.Duration
}

// ParseSummaryInterval parses the YAML and command-line form of
// LogConfig.SummaryInterval: a positive duration such as 30s or 1m, or
// "0" or "off", which disable the summary (a negative result).
func ParseSummaryInterval(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "off" || s == "0" {
		return -1, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want a duration such as 30s or 1m, or off", s)
	}
	if d == 0 {
		return -1, nil
	}
	return d, nil
}

// HTTPConfig configures the endpoint serving /healthz, /readyz,
// /metrics, /routes and the status page on / (Bridge.Handler).
type HTTPConfig struct {
	// Address is host:port to listen on ("address"). Default
	// 127.0.0.1:9470: loopback only. Use ":9470" to listen on every
	// interface.
	Address string
	// Disabled turns the endpoint off ("disabled").
	Disabled bool
}

// Route forwards one topic to another, possibly on another broker.
type Route struct {
	// Name identifies the route in logs and metrics ("name"). Required,
	// unique, letters, digits, '.', '_' and '-'.
	Name string
	// From is where messages are consumed ("from").
	From Source
	// To is where they are published ("to").
	To Destination
	// Concurrency is how many messages are forwarded at once ("concurrency").
	// A pipelined route (see docs/bridge.md: every at-least-once or
	// at-most-once route with Batch above 1, no Dedup and no OpenTelemetry
	// instrumentation) forwards them in ⌈Concurrency ÷ Batch⌉ lanes, each
	// publishing up to Batch copies per call; the others in Concurrency
	// lanes of one message. Messages with the same Key are forwarded in
	// delivery order (one batch after another; a copy that failed in a
	// batch and is retried alone can be overtaken by the later copies of
	// its batch, see docs/bridge.md); 1 keeps the order of the
	// whole topic (on a pipelined route, so does any Concurrency ≤ Batch:
	// one lane). It is bounded in practice by
	// the source's in-flight window (Source.InFlight). Default 512.
	Concurrency int
	// Batch is the most messages published to the destination in one call
	// ("batch"): copies forwarded at the same time share a Publish call
	// (and so the broker's batch API), each still acked or failed on its
	// own. 1 publishes every message alone. Default 100.
	Batch int
	// PublishTimeout bounds one publish to the destination
	// ("publish_timeout"). Default 30s.
	PublishTimeout time.Duration
	// Retry retries a failed publish in process before the message is
	// nacked or poisoned ("retry"). Nil: default retry (5 attempts).
	Retry *Retry
	// Poison moves messages the destination rejects permanently (or that
	// still fail when retries are exhausted) to a poison topic instead of
	// redelivering them for ever ("poison"). Nil: no poison topic.
	Poison *Poison
	// Dedup skips messages whose ID this route already forwarded
	// ("dedup"). Nil: no deduplication.
	Dedup *Dedup
	// Guarantee is the route's delivery guarantee ("guarantee":
	// at-most-once, at-least-once or exactly-once). The default,
	// relay.AtLeastOnce, acks the source only after the destination
	// accepted the copy, and redelivers it otherwise. relay.AtMostOnce
	// acks the source before the publish and publishes once: a failed
	// publish loses the message (logged, counted as an error), it is never
	// retried or redelivered. An at-most-once route takes no Retry and no
	// Poison (Validate refuses them: both exist to keep a failed message
	// for another try, which at-most-once gives up). relay.ExactlyOnce
	// needs a source and destination that open as an exactly-once pair
	// (relay.CheckExactlyOnce: kafka:// to kafka:// on one cluster, with
	// transactional_id=); the route then consumes and publishes in Kafka
	// transactions, so read_committed consumers of the destination see
	// each source message once. Validate refuses it for anything else;
	// Dedup gives its effect on at-least-once.
	Guarantee relay.Guarantee
}

// Source is the consuming end of a route.
type Source struct {
	// URL of the broker ("url"), e.g. amqp://user:${PASS}@host:5672/.
	URL string
	// Topic to consume ("topic"). Required.
	Topic string
	// Group the bridge consumes in ("group"): bridges that share a group
	// share the work. Required, either here or as group= in URL, except
	// for sqs:// where the queue itself is the group.
	Group string
	// ID names this topic for loop prevention ("id"). Default: derived
	// from the URL's scheme, host and path and the topic. Set it when
	// bridges running in opposite directions spell the same broker
	// differently (a DNS name and an IP address, other Kafka seeds).
	ID string
	// InFlight is the subscription's window of unsettled messages
	// ("inflight"), set as inflight= on the URL unless the URL has it.
	// Forwarding is bound by window ÷ (consume + publish latency), so a
	// bridge wants a larger window than an application. Default 1024 for
	// the schemes of this module (all take inflight=; 256 for amqp://,
	// whose prefetch counts messages, not bytes); for other schemes only
	// when set.
	InFlight int
	// InFlightBytes bounds the payload and metadata bytes of the window
	// beside InFlight ("inflight_bytes", a number of bytes or a size such
	// as 64MiB), set as inflight_bytes= on the URL unless the URL has it.
	// Every message a route holds (published, being retried, waiting for
	// its lane) is an unsettled message of the source, so this bounds the
	// route's memory for messages: small messages fill the InFlight
	// window, large ones stop at this bound. Default: the adapter's, 64 MiB
	// for the schemes of this module.
	InFlightBytes int64
}

// Destination is the publishing end of a route.
type Destination struct {
	// URL of the broker ("url").
	URL string
	// Topic to publish to ("topic"). Default: the source topic.
	Topic string
	// ID names this topic for loop prevention ("id"); see Source.ID.
	ID string
}

// Retry configures in-process retries of a failed publish.
type Retry struct {
	// MaxAttempts counts the first try ("max_attempts"). 1 disables
	// retries. Default 5.
	MaxAttempts int
	// InitialInterval is the first backoff ("initial_interval"). Default 100ms.
	InitialInterval time.Duration
	// MaxInterval caps the backoff ("max_interval"). Default 10s.
	MaxInterval time.Duration
	// MaxElapsed bounds the time spent retrying one delivery
	// ("max_elapsed"). 0: no bound beyond MaxAttempts.
	MaxElapsed time.Duration
}

// Poison names the poison topic of a route.
type Poison struct {
	// URL of the broker that keeps the poison topic ("url"). Default: the
	// source URL without its group= parameter, so that poisoned messages
	// stay on the broker they came from. Required when the source URL has
	// other parameters and a scheme of another module (this module's
	// schemes accept both sides' parameters on either side).
	URL string
	// Topic is the poison topic ("topic"). Required.
	Topic string
	// AfterDeliveries also poisons a message that still fails on its Nth
	// delivery ("after_deliveries"), whatever the error. Default 0: only
	// messages the destination rejects for good (too large, invalid,
	// unsupported) are poisoned, and a destination that is down delays
	// messages instead of poisoning them.
	AfterDeliveries int
}

// Dedup configures duplicate suppression by message ID.
type Dedup struct {
	// Store is "memory" (per process) or a redis:// URL shared by every
	// replica ("store"). Default memory.
	Store string
	// TTL is how long an ID is remembered ("ttl"). Default 24h.
	TTL time.Duration
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// withDefaults returns a copy of c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "relay-bridge"
	}
	if c.Log.Level == "" {
		c.Log.Level = DefaultLogLevel
	}
	if c.Log.Format == "" {
		c.Log.Format = DefaultLogFormat
	}
	if c.Log.SummaryInterval == 0 {
		c.Log.SummaryInterval = DefaultSummaryInterval
	}
	if c.HTTP.Address == "" {
		c.HTTP.Address = DefaultHTTPAddress
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	routes := make([]Route, len(c.Routes))
	for i, r := range c.Routes {
		if r.To.Topic == "" {
			r.To.Topic = r.From.Topic
		}
		if r.Concurrency == 0 {
			r.Concurrency = DefaultConcurrency
		}
		if r.From.InFlight == 0 && builtinScheme(r.From.URL) {
			r.From.InFlight = DefaultSourceInFlight
			if scheme(r.From.URL) == "amqp" || scheme(r.From.URL) == "amqps" {
				r.From.InFlight = DefaultSourceInFlightAMQP
			}
		}
		if r.Batch == 0 {
			r.Batch = DefaultBatch
		}
		if r.PublishTimeout == 0 {
			r.PublishTimeout = DefaultPublishTimeout
		}
		if r.Guarantee == relay.AtMostOnce {
			r.Retry = nil // the chain runs once (see Route.Guarantee)
		} else {
			rt := Retry{}
			if r.Retry != nil {
				rt = *r.Retry
			}
			if rt.MaxAttempts == 0 {
				rt.MaxAttempts = DefaultRetryAttempts
			}
			if rt.InitialInterval == 0 {
				rt.InitialInterval = DefaultRetryInitial
			}
			if rt.MaxInterval == 0 {
				rt.MaxInterval = max(DefaultRetryMax, rt.InitialInterval)
			}
			r.Retry = &rt
		}
		if r.Poison != nil {
			p := *r.Poison
			if p.URL == "" {
				p.URL, _ = sourceAsPublisherURL(r.From.URL)
			}
			r.Poison = &p
		}
		if r.Dedup != nil {
			d := *r.Dedup
			if d.Store == "" {
				d.Store = "memory"
			}
			if d.TTL == 0 {
				d.TTL = DefaultDedupTTL
			}
			r.Dedup = &d
		}
		routes[i] = r
	}
	c.Routes = routes
	return c
}

// WithDefaults returns a copy of c with every zero field set to its
// documented default. c is not modified.
func (c Config) WithDefaults() Config { return c.withDefaults() }

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
		case strings.EqualFold(u.Scheme, "sqs"):
			if r.From.Group != "" || urlGroup != "" {
				p.add(src+".group", "not used with sqs:// (the queue is the unit of competing consumers); use sns:// to give each group its own queue")
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
// when other query parameters remain and the scheme is not one of this
// module's, which all accept both sides' parameters on either side.
func sourceAsPublisherURL(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return raw, false
	}
	q := u.Query()
	q.Del("group")
	if len(q) > 0 && !builtinScheme(raw) {
		return raw, false
	}
	if len(q) == 0 {
		u.RawQuery = ""
		u.ForceQuery = false
		return u.String(), true
	}
	return withQuery(raw, func(v url.Values) { v.Del("group") }), true
}

// scheme returns raw's URL scheme in lower case ("" when raw does not
// parse).
func scheme(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme)
}

// builtinScheme reports whether raw uses a scheme of this module's
// adapters, which all take inflight=.
func builtinScheme(raw string) bool {
	switch scheme(raw) {
	case "mem", "redis", "rediss", "amqp", "amqps", "kafka", "sqs", "sns":
		return true
	}
	return false
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

// schemeOf names the backend of a URL by its scheme ("kafka://"), or
// "an unparsed URL".
func schemeOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		return u.Scheme + "://"
	}
	return "an unparsed URL"
}
