package bridge

import (
	"sync/atomic"
	"time"
)

// recovery is the part of a failure that tells whether the route works
// again. The monitor's once-a-second tick decides (noteRecovery): the
// forwarding path pays nothing for it.
type recovery struct {
	// session is the route's session count when the error happened.
	session int64
	// base is how many forwarded messages do not show a recovery: those
	// forwarded before the error and the others in flight then.
	base int64
	// recoveredNS is when the route was seen working again (UnixNano), 0
	// while the error is live. Written once, by the monitor.
	recoveredNS atomic.Int64
}

// recovered returns when the route recovered from f, nil while f is live.
func (f *recovery) recovered() *time.Time {
	ns := f.recoveredNS.Load()
	if ns == 0 {
		return nil
	}
	t := time.Unix(0, ns).UTC()
	return &t
}

// noteRecovery marks the route's last error recovered at now once the
// route is ready (both ends connected, the source subscribed) and has
// shown it works since the error: it forwarded more messages than were in
// flight beside the failed one then (those may have been completing as
// the error happened), so the failed message itself or a later one went
// through, or a session began after it (a reconnect). A
// new error replaces the recovered one and is live again. The recovery is
// logged once, with the error it ends; the summary lines stop repeating
// the error. Called by the monitor only.
func (r *route) noteRecovery(now time.Time) {
	f := r.lastFailure.Load()
	if f == nil || f.recoveredNS.Load() != 0 {
		return
	}
	fwd := count(r.m.forwarded)
	forwarded := fwd > f.base
	reconnected := r.sessions.Load() > f.session
	if !forwarded && !reconnected || r.ready() != nil {
		return
	}
	f.recoveredNS.Store(now.UnixNano())
	r.log.Info("route recovered", "last_error", redactAll(f.err.Error()), "last_error_time", f.at.UTC(),
		"recovered_at", now.UTC(), "forwarded_since", fwd-f.base)
}
