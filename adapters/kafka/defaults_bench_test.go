package kafka_test

import (
	"testing"

	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkDefaults compares relay at its defaults (a subscriber URL with
// a group and nothing else; Publish calls of 100 messages from 16
// goroutines, as a service publishes) with the fastest franz-go loops on
// the same kfake cluster: franz-go's asynchronous producer fed from one
// goroutine (rawAsyncPublishRate); PollRecords of every buffered record,
// committed synchronously after each poll. Use a fixed count:
//
//	go test -run '^$' -bench Defaults -benchtime 200000x ./adapters/kafka/
func BenchmarkDefaults(b *testing.B) {
	c := benchCluster(b)
	const rounds = 5
	b.Run("publish", func(b *testing.B) {
		relaytest.CompareRounds(b, rounds,
			func(n int) relaytest.Round { return relayParallelPublishRate(b, c, n, 16, 100) },
			func(n int) relaytest.Round { return rawAsyncPublishRate(b, c, n) })
	})
	b.Run("consume-ack", func(b *testing.B) {
		relaytest.CompareRounds(b, rounds,
			func(n int) relaytest.Round { return relayConsumeRate(b, c, n, 0, noWork) },
			func(n int) relaytest.Round { return rawConsumeRate(b, c, n, -1, noWork) })
	})
}
