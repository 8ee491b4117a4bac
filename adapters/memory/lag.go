package memory

import "context"

// Lag implements driver.LagDriver: the messages of topic that the group
// has not acked, whether waiting in its queue, held back by NackAfter, or
// delivered and not yet settled. For a group that does not exist yet it is
// the retained messages when the topic has no group (they would go to
// this one) and 0 otherwise. It never fails.
func (d *subDriver) Lag(_ context.Context, topic string) (int64, error) {
	return d.b.lag(topic, d.group), nil
}
