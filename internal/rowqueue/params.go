package rowqueue

import (
	"time"

	"github.com/go-relay/relay/driver/urlopt"
)

// Params are the URL parameters of a table queue's subscriber.
type Params struct {
	Group         string        // group=
	InFlight      int           // inflight=
	InFlightBytes int64         // inflight_bytes=
	Lease         time.Duration // lease=
	Poll          time.Duration // poll=
}

// ReadParams reads Params from p, with the defaults of def for those not
// given (def.Group is not used: a group has no default), and records their
// problems in p: a group is required when subscriber (urlopt's
// Params.Group) and must be ValidText, lease must be at least minLease, poll
// positive, inflight at least 1.
func ReadParams(p *urlopt.Params, subscriber bool, def Params, minLease time.Duration) Params {
	r := Params{
		Group:         p.Group(subscriber),
		InFlight:      p.Int("inflight", def.InFlight, 1),
		InFlightBytes: p.Bytes("inflight_bytes", def.InFlightBytes),
		Lease:         p.Duration("lease", def.Lease),
		Poll:          p.Duration("poll", def.Poll),
	}
	if why := ValidText(r.Group); why != "" {
		p.Fail("group", "%s", why)
	}
	if r.Lease < minLease {
		p.Fail("lease", "must be at least %v", minLease)
	}
	if r.Poll <= 0 {
		p.Fail("poll", "must be positive")
	}
	return r
}
