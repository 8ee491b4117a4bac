package postgres

import (
	"context"
	"fmt"
)

// Lag implements driver.LagDriver: the delivery rows of topic the
// subscriber's group has not acknowledged, claimed or not, including
// those waiting out a NackAfter delay. A group that does not exist yet
// counts 0 (it receives only what is published after it is created).
func (d *subDriver) Lag(ctx context.Context, topic string) (int64, error) {
	var n int64
	if err := d.pool.QueryRow(ctx, d.q.lag, topic, d.cfg.Group).Scan(&n); err != nil {
		return 0, fmt.Errorf("relay/postgres: counting the lag of group %q on %q: %w", d.cfg.Group, topic, err)
	}
	return n, nil
}
