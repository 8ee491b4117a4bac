package amqp_test

import (
	"testing"

	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkDefaults compares relay at its defaults (a subscriber URL with
// a group and nothing else) with the fastest amqp091-go loop: publishing
// in confirm mode, 100 messages per batch of confirmations
// (rawPublishRate); consuming with a prefetch of rawBestPrefetch and one
// multiple ack per rawBestAckEvery deliveries. Use a fixed count:
//
//	go test -run '^$' -bench Defaults -benchtime 50000x ./adapters/amqp/
func BenchmarkDefaults(b *testing.B) {
	relaytest.DefaultsRatio(b,
		func(b *testing.B, n int) float64 { return relayPublishRate(b, n, relaytest.RatioBatch) },
		func(b *testing.B, n int) float64 { return rawPublishRate(b, n, relaytest.RatioBatch) },
		func(b *testing.B, n int) float64 { return relayConsumeRateWith(b, n) },
		func(b *testing.B, n int) float64 { return rawConsumeAcking(b, n, rawBestPrefetch, rawBestAckEvery) })
}

// The best raw loop's prefetch count and how many deliveries one
// multiple ack covers.
const (
	rawBestPrefetch = 1000
	rawBestAckEvery = 250
)
