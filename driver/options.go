package driver

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

func (o *Options) defaults() {
	if o.InFlight <= 0 {
		o.InFlight = 64
	}
	o.MaxInFlight = max(o.MaxInFlight, o.InFlight)
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

// GroupRequired is the reason a subscriber without a group is refused,
// for adapters' URL parsers (urlopt's Params.Group says it) and config
// checks (CheckGroup), so that every adapter says it alike.
const GroupRequired = "required: the name of this subscriber's group of competing consumers"

// CheckGroup is the error of a subscriber config of backend without a
// group ("relay/<backend>: Group is required: ..."), nil when group is
// set; for Validate methods.
func CheckGroup(backend, group string) error {
	if group != "" {
		return nil
	}
	return fmt.Errorf("relay/%s: Group is %s", backend, GroupRequired)
}
