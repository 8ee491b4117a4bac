package gcppubsub_test

import (
	"testing"

	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkDefaults compares relay at its defaults (a subscriber URL with
// a group and nothing else) with the fastest loop of the raw API: one
// Publish request per 100 messages (rpcPublishRate); Pull(rawBestPull)
// and one Acknowledge per answer. Against pstest in this process unless
// RELAY_TEST_GCP_PROJECT points elsewhere (see BenchmarkRatio). Use a
// fixed count:
//
//	go test -run '^$' -bench Defaults -benchtime 20000x ./adapters/gcppubsub/
func BenchmarkDefaults(b *testing.B) {
	tg := newTarget(b)
	raw := tg.raw(b)
	relaytest.DefaultsRatio(b,
		func(b *testing.B, n int) float64 { return relayPublishRate(b, tg, raw, n) },
		func(b *testing.B, n int) float64 { return rpcPublishRate(b, raw, tg.project(), n) },
		func(b *testing.B, n int) float64 { return relayConsumeRate(b, tg, raw, n) },
		func(b *testing.B, n int) float64 { return rpcConsumeRateMax(b, tg, raw, n, rawBestPull) })
}

// rawBestPull is the best raw loop's Pull size.
const rawBestPull = 1000
