package sqlite_test

import (
	"context"
	"testing"
	"time"

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
	relaytest.DefaultsRatio(b, relayPublishRate, rawPublishRate, relayDefaultConsumeRate, rawBestConsumeRate)
}

// rawBestClaim is the best raw loop's claim size.
const rawBestClaim = 1000

func relayDefaultConsumeRate(b *testing.B, n int) float64 {
	base, raw, topic, group := benchFile(b)
	rawPublish(b, raw, topic, n)
	return relaytest.ConsumeRate(b, openSub(b, base, group), topic, n)
}

func rawBestConsumeRate(b *testing.B, n int) float64 {
	_, raw, topic, group := benchFile(b)
	rawPublish(b, raw, topic, n)
	start := time.Now()
	if err := raw.Drain(context.Background(), topic, group, n, rawBestClaim); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}
