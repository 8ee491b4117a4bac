package amqp

import "time"

// DueQueueNames lists every due queue name exchange can have, for tests
// that clean up after themselves.
func DueQueueNames(exchange string) []string {
	var out []string
	for b := uint64(1); ; {
		out = append(out, dueQueue(exchange, b))
		if b >= 1<<maxDelayExp {
			return out
		}
		b = dueBucket(time.Duration(b+1) * time.Millisecond)
	}
}
