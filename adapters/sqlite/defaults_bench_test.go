package sqlite_test

import (
	"testing"

	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkDefaults compares relay at its defaults (a subscriber URL with
// a group and nothing else) with the fastest database/sql loop on the
// same file: publishing as rawPublishRate does; consuming with claims of
// rawBestClaim rows, each batch deleted in one transaction. Use a fixed
// count:
//
//	go test -run '^$' -bench Defaults -benchtime 20000x ./adapters/sqlite/
func BenchmarkDefaults(b *testing.B) {
	relaytest.DefaultsRatio(b, relayPublishRate, rawPublishRate,
		func(b *testing.B, n int) float64 { return relayConsumeRateWith(b, n) },
		func(b *testing.B, n int) float64 { return rawClaimRate(b, n, rawBestClaim) })
}

// rawBestClaim is the best raw loop's claim size.
const rawBestClaim = 1000
