package driver

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Options tune the shared subscription machinery. Zero values take defaults.
type Options struct {
	// InFlight is how many unsettled messages a subscription may hold.
	// Default 64.
	InFlight int
	// ExtendEvery is the lease-extension period for Extender receivers.
	// Default 0: no extension.
	ExtendEvery time.Duration
	// BrokerTimeout bounds each Settle, Release and Extend call. Default 10s.
	BrokerTimeout time.Duration
	// CloseTimeout bounds the teardown of a subscription once its ctx is
	// done or the subscriber closes: the final settlements (with their
	// retries), the release of unsettled messages and the receiver's Close
	// share this one deadline, whatever BrokerTimeout says. What could not
	// be sent by then is logged; the broker redelivers it after its own
	// timeout. Default DefaultCloseTimeout (5s).
	CloseTimeout time.Duration
	// SettleLinger is how long settlements may wait to fill a batch of
	// SettleBatch before they are sent; they are sent at once
	// when nothing else is held. Default 1ms.
	SettleLinger time.Duration
	// SettleBatch is how many pending settlements are sent without
	// lingering (and so, with a fast handler, how many window slots are
	// freed at once for the next Receive). Default half the window, so
	// that the handler works on one half while the other is settled and
	// refilled. A driver whose receive calls cost more than its settle
	// calls may set the whole window, so that a fast handler's acks free
	// the window in one step and Receive asks for all of it. At most
	// InFlight.
	SettleBatch int
	// InFlightBytes bounds the bytes (payload, ID, Key and metadata) of
	// the unsettled messages a subscription holds, beside InFlight, so
	// that a large window is safe for large messages. Receive is asked
	// for no more messages than fit by the largest recent message size,
	// never for more than a quarter of the bound's worth in one call, and
	// not at all while the bound is reached; a single message larger
	// than the bound is still delivered (the window never drops below one
	// message), and a batch of messages larger than the ones before it can
	// overshoot the bound by that batch. Until the first message's size
	// is known, Receive is asked for that one message, and the next call
	// waits up to a millisecond (SettleLinger when shorter) for it to be
	// settled, so that a fast handler's windows start whole instead of
	// one message apart. Default DefaultInFlightBytes; negative: no byte
	// bound.
	InFlightBytes int64
	// Logger receives transient errors. Default slog.Default().
	Logger *slog.Logger
	// Group is the group the subscriber was opened for, which
	// Subscriber.Group reports ("" where the topic itself is the group,
	// as on sqs://).
	Group string
}

// DefaultInFlightBytes is the default of Options.InFlightBytes: 64 MiB,
// which lets a window of small messages fill up and bounds what a window
// of large ones holds.
const DefaultInFlightBytes = 64 << 20

func (o *Options) defaults() {
	if o.InFlight <= 0 {
		o.InFlight = 64
	}
	if o.BrokerTimeout <= 0 {
		o.BrokerTimeout = 10 * time.Second
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
	if o.SettleLinger <= 0 {
		o.SettleLinger = time.Millisecond
	}
	if o.InFlightBytes == 0 {
		o.InFlightBytes = DefaultInFlightBytes
	}
	if o.SettleBatch <= 0 {
		o.SettleBatch = max(1, o.InFlight/2)
	}
	o.SettleBatch = min(o.SettleBatch, o.InFlight)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// DefaultCloseTimeout is the default of Options.CloseTimeout and of the
// close timeout of NewPublisher.
const DefaultCloseTimeout = 5 * time.Second

// ParseBytes reads a positive byte count with an optional binary unit
// (B, KiB, MiB, GiB, TiB), as inflight_bytes= takes it: "1048576",
// "512KiB", "64MiB". For adapters' URL parsers.
func ParseBytes(v string) (int64, error) {
	s := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a positive byte count such as 1048576, 512KiB or 64MiB", v)
	}
	return n * mult, nil
}
