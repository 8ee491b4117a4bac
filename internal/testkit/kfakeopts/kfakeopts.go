// Package kfakeopts holds the settings relay's tests give a kfake cluster
// (franz-go's in-memory Kafka), so that the in-process clusters of the
// Kafka adapter's tests and the standalone one of internal/cmd/kfakeserver
// behave alike.
package kfakeopts

import (
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Partitions is how many partitions a topic created without a count gets.
const Partitions = 4

// Defaults returns one broker, topics of Partitions partitions, and group
// sessions allowed down to 100ms (so that the tests' rebalances take
// fractions of a second). Options after these in a kfake.NewCluster call
// override them.
func Defaults() []kfake.Opt {
	return []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
		kfake.DefaultNumPartitions(Partitions),
	}
}
