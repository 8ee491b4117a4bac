package bridge

import (
	"context"
	"math"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/go-relay/relay"
)

// Status is the live view of a bridge: what GET /routes serves as JSON
// and what `relay status` prints. Field names and meanings are part of the
// documented contract (docs/bridge.md); fields may be added, none renamed
// or removed.
type Status struct {
	// Bridge is Config.Name.
	Bridge string `json:"bridge"`
	// Instance names this process among the replicas of the bridge
	// (Options.Instance; default HOSTNAME:PID).
	Instance string `json:"instance"`
	// Time is when the view was taken.
	Time time.Time `json:"time"`
	// Started is when Run began; nil before.
	Started *time.Time `json:"started"`
	// Routes are in config order.
	Routes []RouteStatus `json:"routes"`
}

// Route states (RouteStatus.State).
const (
	// StateStarting: opening the endpoints and subscribing (at start and
	// on every reconnect).
	StateStarting = "starting"
	// StateRunning: subscribed to the source and forwarding.
	StateRunning = "running"
	// StateCaughtUp: running, and the source has been empty with nothing
	// in flight at every check for Route.CaughtUpAfter (CaughtUpSince says
	// since when): the cutover signal of docs/migration.md.
	StateCaughtUp = "caught-up"
	// StateRetrying: the last connection failed or broke (LastError says
	// why); waiting with backoff before connecting again.
	StateRetrying = "retrying"
	// StateDraining: the bridge is stopping; messages in flight finish.
	StateDraining = "draining"
	// StateStopped: not forwarding: before Run, after the drain, or after
	// an endpoint's adapter refused its URL (LastError says why).
	StateStopped = "stopped"
	// StateDrained: stopped on its own by Route.StopWhen once its source
	// was drained.
	StateDrained = "drained"
	// StateFenced: "fenced, rejoining": the source's broker fenced the
	// route's session (relay.ErrFenced; LastError says why: an
	// exactly-once transaction that timed out during a pause, or another
	// instance with the same transactional_id). The route left its group,
	// holds no partitions, and opens a new session (a new producer epoch,
	// a new group membership); not ready meanwhile.
	StateFenced = "fenced"
)

// RouteStatus is the live view of one route. Counters count since New.
type RouteStatus struct {
	// Name is Route.Name.
	Name string `json:"name"`
	// From is the source, To the destination; URLs are redacted.
	From RouteEnd `json:"from"`
	To   RouteEnd `json:"to"`
	// State is one of the State constants.
	State string `json:"state"`
	// Ready is what /readyz says for this route; NotReady says why not
	// (redacted), nil when ready.
	Ready    bool    `json:"ready"`
	NotReady *string `json:"not_ready"`
	// Forwarded counts messages published to the destination and acked
	// at the source (relay_bridge_forwarded_total).
	Forwarded int64 `json:"forwarded"`
	// ForwardedPerSec10s is the forwarding rate over about the last 10
	// seconds, from per-second samples of Forwarded.
	ForwardedPerSec10s float64 `json:"forwarded_per_sec_10s"`
	// ForwardedPerSecAvg is Forwarded divided by the time since Run began
	// (until it returned).
	ForwardedPerSecAvg float64 `json:"forwarded_per_sec_avg"`
	// SourceLag is the last number of messages the source reported waiting
	// for the route's group (relay.LagReporter, asked every 5 s); nil when
	// the source has not told (yet) or cannot.
	SourceLag *int64 `json:"source_lag"`
	// InFlight counts the messages being forwarded now (received, not yet
	// settled), InFlightBytes their payload bytes.
	InFlight      int64 `json:"in_flight"`
	InFlightBytes int64 `json:"in_flight_bytes"`
	// Retries counts publishes retried in process; Failed deliveries that
	// failed after the retries; Poisoned messages moved to the poison
	// topic; Looped and Duplicates messages acked without forwarding.
	Retries    int64 `json:"retries"`
	Failed     int64 `json:"failed"`
	Poisoned   int64 `json:"poisoned"`
	Looped     int64 `json:"looped"`
	Duplicates int64 `json:"duplicates"`
	// CaughtUpSince is when the route became caught up (StateCaughtUp);
	// nil when it is not.
	CaughtUpSince *time.Time `json:"caught_up_since"`
	// CaughtUpUnknown says why the route can never report caught-up (its
	// source cannot tell its lag); nil when it can.
	CaughtUpUnknown *string `json:"caught_up_unknown"`
	// LastForwarded is the latest message the destination confirmed: the
	// end of the overlap a consumer moving to the destination dedups over
	// (docs/migration.md); nil before the first.
	LastForwarded *Forwarded `json:"last_forwarded"`
	// StopWhen is Route.StopWhen ("drained"), absent when unset.
	StopWhen string `json:"stop_when,omitempty"`
	// Holds is what this replica holds of the source's work while it is
	// subscribed (nil otherwise): Kafka partitions, whether it is a
	// RabbitMQ single active consumer, or "competing" where every replica
	// takes messages from one shared queue or stream.
	Holds *HoldsStatus `json:"holds"`
	// LastError is the latest error of the route (a failed or retried
	// publish, a poisoned message, a lost or failed connection), redacted;
	// nil when there was none. It stays after the route recovered, with
	// RecoveredAt set.
	LastError *ErrorStatus `json:"last_error"`
}

// Forwarded names a message the destination confirmed.
type Forwarded struct {
	ID string `json:"id"`
	// SourcePosition is where it was kept in the source (relay.Position's
	// form: "3:1042", "1700000000000-0", "1042"); absent for a source
	// without positions.
	SourcePosition string    `json:"source_position,omitempty"`
	Time           time.Time `json:"time"`
}

// HoldsStatus is what a replica holds of a route's source
// (relay.Assignment).
type HoldsStatus struct {
	// Mode is relay.ShareCompeting, relay.SharePartitions or
	// relay.ShareSingleActive.
	Mode string `json:"mode"`
	// Partitions held (Mode partitions), ascending; empty while none.
	Partitions []int32 `json:"partitions,omitempty"`
	// Active: this replica is the single active consumer (Mode
	// single-active).
	Active *bool `json:"active,omitempty"`
}

// RouteEnd names one end of a route in a RouteStatus.
type RouteEnd struct {
	// URL is the configured URL, redacted with relay.Redact.
	URL   string `json:"url"`
	Topic string `json:"topic"`
	// Group is the source's consumer group; absent for the destination.
	Group string `json:"group,omitempty"`
}

// ErrorStatus is an error and when it happened.
type ErrorStatus struct {
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
	// RecoveredAt is when the route was seen working again after the
	// error (see route.noteRecovery), nil while the error is live.
	RecoveredAt *time.Time `json:"recovered_at"`
}

// Status returns the live view of every route. It reads counters and
// takes no lock the forwarding path takes; safe for concurrent use, before,
// during and after Run.
func (b *Bridge) Status() Status {
	now := time.Now()
	b.mu.Lock()
	started, stopped, done := b.startedAt, b.stoppedAt, b.runDone
	b.mu.Unlock()
	st := Status{Bridge: b.cfg.Name, Instance: b.instance, Time: now.UTC(), Routes: make([]RouteStatus, 0, len(b.routes))}
	var elapsed time.Duration
	if !started.IsZero() {
		s := started.UTC()
		st.Started = &s
		end := now
		if !stopped.IsZero() {
			end = stopped
		}
		elapsed = end.Sub(started)
	}
	stopping := false
	if done != nil {
		select {
		case <-done:
			stopping = true
		default:
		}
	}
	for _, r := range b.routes {
		st.Routes = append(st.Routes, r.status(now, elapsed, stopping))
	}
	return st
}

// status is the route's part of Status; elapsed is how long the bridge has
// run, stopping whether its Run ctx is done.
func (r *route) status(now time.Time, elapsed time.Duration, stopping bool) RouteStatus {
	rs := RouteStatus{
		Name:          r.cfg.Name,
		From:          RouteEnd{URL: relay.Redact(r.cfg.From.URL), Topic: r.cfg.From.Topic, Group: sourceGroup(r.cfg.From)},
		To:            RouteEnd{URL: relay.Redact(r.cfg.To.URL), Topic: r.cfg.To.Topic},
		Forwarded:     count(r.m.forwarded),
		InFlight:      count(r.m.inFlight),
		InFlightBytes: count(r.m.inFlightBytes),
		Retries:       count(r.m.retries),
		Failed:        count(r.m.failed),
		Poisoned:      count(r.m.poisoned),
		Looped:        count(r.m.looped),
		Duplicates:    count(r.m.duplicates),
	}
	rs.ForwardedPerSec10s = round2(r.rates.rate(now, rs.Forwarded, rateWindow))
	if elapsed > 0 {
		rs.ForwardedPerSecAvg = round2(float64(rs.Forwarded) / elapsed.Seconds())
	}
	if r.lagKnown.Load() {
		n := r.lag.Load()
		rs.SourceLag = &n
	}
	rs.StopWhen = r.cfg.StopWhen
	rs.CaughtUpUnknown = r.cut.unknown.Load()
	if l := r.cut.lastForwarded(); l.id != "" {
		rs.LastForwarded = &Forwarded{ID: l.id, SourcePosition: l.pos.String(), Time: l.at.UTC()}
	}
	caughtUp, caught := r.cut.caughtUpSince()
	if f := r.lastFailure.Load(); f != nil {
		rs.LastError = &ErrorStatus{Message: redactAll(f.err.Error()), Time: f.at.UTC(), RecoveredAt: f.recovered()}
	}
	if err := r.ready(); err != nil {
		msg := redactAll(err.Error())
		rs.NotReady = &msg
	} else {
		rs.Ready = true
	}
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	if sess != nil && sess.subscribed() {
		rs.Holds = sess.holds(r.cfg.From.Topic)
	}
	switch phase := r.phase.Load(); {
	case phase == phaseStopped && r.cut.drained.Load():
		rs.State = StateDrained
	case phase == phaseStopped:
		rs.State = StateStopped
	case stopping || r.cut.drained.Load():
		rs.State = StateDraining
	case phase == phaseRetrying:
		rs.State = StateRetrying
	case phase == phaseFenced && (sess == nil || !sess.subscribed()), sess != nil && sess.fenced():
		rs.State = StateFenced
	case sess != nil && sess.subscribed() && caught:
		rs.State = StateCaughtUp
		t := caughtUp.UTC()
		rs.CaughtUpSince = &t
	case sess != nil && sess.subscribed():
		rs.State = StateRunning
	default:
		rs.State = StateStarting
	}
	return rs
}

// sourceGroup is the group the route consumes in: Source.Group or the
// URL's group=.
func sourceGroup(s Source) string {
	if s.Group != "" {
		return s.Group
	}
	if u, err := url.Parse(s.URL); err == nil {
		return u.Query().Get("group")
	}
	return ""
}

// count reads a counter or gauge of the route's metrics.
func count(m prometheus.Metric) int64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return 0
	}
	switch {
	case d.Counter != nil:
		return int64(d.Counter.GetValue())
	case d.Gauge != nil:
		return int64(d.Gauge.GetValue())
	}
	return 0
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// failure is an error of a route, when it happened, and the route's
// recovery from it (recovery.go).
type failure struct {
	err error
	at  time.Time
	recovery
}

// fail records err as the route's last error. It runs only when something
// failed, never for a message that was forwarded.
func (r *route) fail(err error) {
	if err != nil {
		// The messages in flight beside the one that failed may complete
		// without the destination being back (their publish was accepted
		// before the error): only forwards beyond them show it works again.
		base := count(r.m.forwarded) + max(0, count(r.m.inFlight)-1)
		r.lastFailure.Store(&failure{err: err, at: time.Now(), recovery: recovery{session: r.sessions.Load(), base: base}})
	}
}

// Route lifecycle phases (route.phase); Status derives the State from the
// phase, the session and whether the bridge is stopping.
const (
	phaseStopped int32 = iota
	phaseStarting
	phaseRetrying
	phaseFenced // a fenced session ended; a new one is opening
)

// rateWindow is the span of RouteStatus.ForwardedPerSec10s; rateSamples
// per-second samples cover it.
const (
	rateWindow  = 10 * time.Second
	rateSamples = 11
)

// rateRing keeps the last rateSamples samples of a counter, taken once a
// second by the bridge's monitor (never per message). Safe for concurrent
// use.
type rateRing struct {
	mu   sync.Mutex
	s    [rateSamples]sample
	n    int // samples kept, up to rateSamples
	next int // index of the next sample to write
}

type sample struct {
	at    time.Time
	count int64
}

func (r *rateRing) add(at time.Time, count int64) {
	r.mu.Lock()
	r.s[r.next] = sample{at, count}
	r.next = (r.next + 1) % rateSamples
	r.n = min(r.n+1, rateSamples)
	r.mu.Unlock()
}

// rate returns the counter's increase per second from the oldest sample
// at most window old to (now, count); 0 without such a sample.
func (r *rateRing) rate(now time.Time, count int64, window time.Duration) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.n {
		// Oldest first: the ring's oldest sample is at next when full.
		s := r.s[(r.next-r.n+i+rateSamples)%rateSamples]
		age := now.Sub(s.at)
		if age > window {
			continue
		}
		if age <= 0 {
			return 0
		}
		return float64(count-s.count) / age.Seconds()
	}
	return 0
}

// monitor samples every route's forwarded counter once a second for the
// 10-second rate and, every summaryEvery (0: never), logs one summary line
// per route, until ctx is done.
func (b *Bridge) monitor(ctx context.Context, summaryEvery time.Duration) {
	sampleAll := func(now time.Time) {
		for _, r := range b.routes {
			r.rates.add(now, count(r.m.forwarded))
		}
	}
	sampleAll(time.Now())
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var summary <-chan time.Time
	if summaryEvery > 0 {
		t := time.NewTicker(summaryEvery)
		defer t.Stop()
		summary = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			sampleAll(now)
			for _, r := range b.routes {
				r.noteRecovery(now)
			}
		case <-summary:
			b.logSummary()
		}
	}
}

// logSummary logs one line per route with the fields of its RouteStatus.
func (b *Bridge) logSummary() {
	st := b.Status()
	for i, rs := range st.Routes {
		attrs := []any{
			"state", rs.State,
			"forwarded", rs.Forwarded,
			"forwarded_per_sec_10s", rs.ForwardedPerSec10s,
			"in_flight", rs.InFlight,
			"in_flight_bytes", rs.InFlightBytes,
			"retries", rs.Retries,
			"failed", rs.Failed,
			"poisoned", rs.Poisoned,
		}
		if rs.SourceLag != nil {
			attrs = append(attrs, "source_lag", *rs.SourceLag)
		}
		if rs.LastError != nil && rs.LastError.RecoveredAt == nil { // a recovery is logged once, by noteRecovery
			attrs = append(attrs, "last_error", rs.LastError.Message, "last_error_time", rs.LastError.Time)
		}
		b.routes[i].log.Info("route summary", attrs...)
	}
}
