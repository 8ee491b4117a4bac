package bridge

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// Defaults of Config fields left zero.
const (
	DefaultHTTPAddress     = "127.0.0.1:9470"
	DefaultShutdownTimeout = 30 * time.Second
	DefaultConcurrency     = 512
	// DefaultSourceInFlight bounds the window of an exactly-once route's
	// source, whatever its adapter declares (see DefaultSourceWindow):
	// there the window is one transaction, which a nack or a rebalance
	// aborts whole. It is also the window most adapters of this module
	// declare (driver.DefaultSourceWindow).
	DefaultSourceInFlight  = driver.DefaultSourceWindow
	DefaultBatch           = 100
	MaxConcurrency         = 4096
	DefaultPublishTimeout  = 30 * time.Second
	DefaultLogLevel        = "info"
	DefaultLogFormat       = "text"
	DefaultSummaryInterval = 30 * time.Second
	DefaultDedupTTL        = 24 * time.Hour
	DefaultRetryAttempts   = 5
	DefaultRetryInitial    = 100 * time.Millisecond
	DefaultRetryMax        = 10 * time.Second
	// DefaultCaughtUpAfter is how long a route's source must stay empty
	// before the route is caught up (Route.CaughtUpAfter).
	DefaultCaughtUpAfter = 5 * time.Second
)

// StopWhenDrained is the value of Route.StopWhen that stops the route once
// its source is drained.
const StopWhenDrained = "drained"

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
	// Profiling serves Go's runtime profiles (in the format go tool pprof reads) under
	// /debug/pprof/ on the same address ("profiling"). Default false: a
	// profile exposes the process's internals and costs CPU while it is
	// taken, so turn it on only on a loopback or otherwise guarded address.
	Profiling bool
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
	// at-most-once route with Batch above 1, with or without Dedup and
	// OpenTelemetry) forwards them in ⌈Concurrency ÷ Batch⌉ lanes, each
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
	// CaughtUpAfter is how long the route must see its source empty
	// (source lag 0) and nothing in flight, at every check, before its
	// state is caught-up: the cutover signal of docs/migration.md
	// ("caught_up_after"). The lag is asked every CaughtUpAfter/4 (at
	// most every 5s, at least every 100ms). Default 5s.
	CaughtUpAfter time.Duration
	// StopWhen stops the route on a condition ("stop_when"): "drained"
	// stops it (drain, close, final counts in the log) once it is caught
	// up, that is once the source is empty and every message taken from
	// it was confirmed by the destination and acked; the bridge exits
	// when every route has stopped. "" (default): run until the bridge
	// stops.
	StopWhen string
	// SourcePositions writes where each message was kept in the source
	// into its copy, as metadata relay.SourceKey ("kafka:orders@3:1042"),
	// for position translation (relay migrate offsets) and to locate a
	// message across brokers ("source_positions"). Sources without
	// lasting positions (amqp://, sqs://) write nothing. It costs a
	// metadata map per message. Default false.
	SourcePositions bool
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
	// bridge wants a larger window than an application. Default
	// DefaultSourceWindow: the window the source's adapter declares
	// (relay.URLDefaults; 1024 on most schemes of this module, 256 on
	// amqp://, 4096 on kafka://), at most DefaultSourceInFlight on an
	// exactly-once route; for an adapter that declares none, only when
	// set.
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
		if r.From.InFlight == 0 {
			r.From.InFlight = DefaultSourceWindow(r.From.URL)
			if r.Guarantee == relay.ExactlyOnce && r.From.InFlight > DefaultSourceInFlight {
				// There the window is the transaction: one nack or
				// rebalance aborts and redelivers all of it.
				r.From.InFlight = DefaultSourceInFlight
			}
		}
		if r.Batch == 0 {
			r.Batch = DefaultBatch
		}
		if r.PublishTimeout == 0 {
			r.PublishTimeout = DefaultPublishTimeout
		}
		if r.CaughtUpAfter == 0 {
			r.CaughtUpAfter = DefaultCaughtUpAfter
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

// DefaultSourceWindow returns the window (Source.InFlight) a route
// subscribes with when it sets none: the one the adapter registered for
// the URL's scheme declares (relay.URLDefaults.SourceWindow), or 0 (the
// adapter's own default) when it declares none. An exactly-once route
// takes at most DefaultSourceInFlight.
func DefaultSourceWindow(sourceURL string) int {
	d, _ := relay.DefaultsOf(sourceURL)
	return d.SourceWindow
}
