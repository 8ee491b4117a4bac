package kafka

import "time"

// SetStuckGrace changes how long a partition's oldest unacked record must
// block it before max_uncommitted applies, and returns a function that
// restores it. Call it before subscribing.
func SetStuckGrace(d time.Duration) (restore func()) {
	old := stuckGrace
	stuckGrace = d
	return func() { stuckGrace = old }
}
