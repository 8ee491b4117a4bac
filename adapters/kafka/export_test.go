package kafka

import (
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// SetStuckGrace changes how long a partition's oldest unacked record must
// block it before max_uncommitted applies, and returns a function that
// restores it. Call it before subscribing.
func SetStuckGrace(d time.Duration) (restore func()) {
	old := stuckGrace
	stuckGrace = d
	return func() { stuckGrace = old }
}

// QueuedAhead reports the records and record bytes that sub's member has
// polled for topic and queued ahead of its subscription.
func QueuedAhead(sub relay.Subscriber, topic string) (records, bytes int) {
	d := sub.(*driver.Subscriber).Driver().(*subDriver)
	d.gmu.Lock()
	members := append([]*member(nil), d.members...)
	d.gmu.Unlock()
	for _, m := range members {
		if r := m.receiver(topic); r != nil {
			r.mu.Lock()
			records, bytes = records+r.ahead.Len(), bytes+r.ahead.Bytes()
			r.mu.Unlock()
		}
	}
	return records, bytes
}
