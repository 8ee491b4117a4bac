package redisstream

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-relay/relay"
)

// Lag implements driver.LagDriver: the entries of topic's stream that the
// subscriber's group has not acknowledged. From XINFO GROUPS it is the
// group's lag (entries not yet delivered to any consumer of the group) plus
// its pending count (delivered and not yet XACKed, including entries handed
// back by a Nack). Entries trimmed away or deleted are not counted.
//
// A stream that does not exist counts 0. When the stream exists but the
// group does not, Lag counts what the group would receive when Subscribe or
// Provision creates it at Start: every entry of the stream (XLEN) for "0",
// none for "$".
//
// The lag field needs Redis 7.0 or newer; an older server makes Lag return
// an error wrapping relay.ErrNotSupported. Redis cannot compute the lag
// while entries the group has not read yet were deleted (XDEL) or trimmed
// in a way it cannot account for; Lag then returns an error saying so
// instead of a wrong count, until the group has read past them.
func (d *subDriver) Lag(ctx context.Context, topic string) (int64, error) {
	key := d.cfg.Prefix + topic
	groups, err := d.c.Do(ctx, "XINFO", "GROUPS", key).Slice()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return 0, nil
		}
		return 0, fmt.Errorf("relay/redis: reading the groups of stream %q: %w", key, err)
	}
	for _, g := range groups {
		f := replyFields(g)
		if name, _ := f["name"].(string); name != d.cfg.Group {
			continue
		}
		pending, ok := f["pending"].(int64)
		if !ok {
			return 0, fmt.Errorf("relay/redis: XINFO GROUPS of stream %q reports no pending count for group %q", key, d.cfg.Group)
		}
		raw, ok := f["lag"]
		if !ok {
			return 0, fmt.Errorf("%w: the server does not report the lag of a consumer group (XINFO GROUPS has a lag field from Redis 7.0)", relay.ErrNotSupported)
		}
		lag, ok := raw.(int64)
		if !ok || lag < 0 {
			return 0, fmt.Errorf("relay/redis: Redis cannot tell the lag of group %q on stream %q: entries the group has not read yet were deleted or trimmed (it can again once the group has read past them); %d entries are pending", d.cfg.Group, key, pending)
		}
		return lag + pending, nil
	}
	if d.cfg.Start == StartNewest {
		return 0, nil
	}
	n, err := d.c.XLen(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("relay/redis: reading the length of stream %q: %w", key, err)
	}
	return n, nil
}

// replyFields returns the fields of one XINFO entry, which is a map under
// RESP3 and a flat list of names and values under RESP2.
func replyFields(v any) map[string]any {
	out := map[string]any{}
	switch x := v.(type) {
	case map[any]any:
		for k, v := range x {
			if s, ok := k.(string); ok {
				out[s] = v
			}
		}
	case map[string]any:
		for k, v := range x {
			out[k] = v
		}
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			if s, ok := x[i].(string); ok {
				out[s] = x[i+1]
			}
		}
	}
	return out
}
