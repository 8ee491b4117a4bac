package relay

import "fmt"

// Guarantee is how many times a consumed message may take effect: the
// promise a router handler or a bridge route makes about the messages it
// takes from a subscription. It lives in package relay, not in router,
// because both the router (router.WithGuarantee) and the bridge (a route's
// guarantee:) choose one, and what a pair of backends can give is a
// property of the backends, which later adapters may declare.
//
// The zero value is AtLeastOnce, relay's default.
type Guarantee int

const (
	// AtLeastOnce acks a message only after it was handled and its outputs
	// were published; a failure, a crash or a lost ack redelivers it, so a
	// message may take effect more than once and is never lost.
	AtLeastOnce Guarantee = iota
	// AtMostOnce acks a message before it is handled and never retries or
	// redelivers it: a failure or a crash loses it, and it never takes
	// effect twice through relay.
	AtMostOnce
	// ExactlyOnce makes a message's outputs and its ack take effect once,
	// together: one broker transaction commits both or neither. Only a
	// subscriber and publisher opened as a pair give it
	// (ExactlyOnceSubscriber; Kafka to Kafka on one cluster: see
	// OpenExactlyOnce), and only for what is published with the pair's
	// publisher; consumers of the outputs must read committed data only.
	// The router and the bridge refuse it for anything else, with an error
	// that says why. Dedup middleware gives the exactly-once effect on top
	// of AtLeastOnce on any backend.
	ExactlyOnce
)

// String returns the configuration form: "at-least-once", "at-most-once"
// or "exactly-once".
func (g Guarantee) String() string {
	switch g {
	case AtLeastOnce:
		return "at-least-once"
	case AtMostOnce:
		return "at-most-once"
	case ExactlyOnce:
		return "exactly-once"
	}
	return fmt.Sprintf("Guarantee(%d)", int(g))
}

// ParseGuarantee parses the configuration form of a Guarantee (see String).
// The empty string is AtLeastOnce, the default.
func ParseGuarantee(s string) (Guarantee, error) {
	switch s {
	case "", "at-least-once":
		return AtLeastOnce, nil
	case "at-most-once":
		return AtMostOnce, nil
	case "exactly-once":
		return ExactlyOnce, nil
	}
	return 0, fmt.Errorf("relay: guarantee %q: want at-most-once, at-least-once or exactly-once", s)
}

// MarshalText returns String's form, so a Guarantee encodes as text.
func (g Guarantee) MarshalText() ([]byte, error) {
	if g < AtLeastOnce || g > ExactlyOnce {
		return nil, fmt.Errorf("relay: invalid %v", g)
	}
	return []byte(g.String()), nil
}

// UnmarshalText parses ParseGuarantee's form.
func (g *Guarantee) UnmarshalText(b []byte) error {
	v, err := ParseGuarantee(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}
