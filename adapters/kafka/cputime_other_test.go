//go:build !unix

package kafka_test

import "time"

// cpuTime is unknown here; the benchmarks then report 0 CPU per message.
func cpuTime() time.Duration { return 0 }
