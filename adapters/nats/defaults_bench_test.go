package nats_test

import (
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkDefaults compares relay at its defaults (a subscriber URL with
// a group and nothing else) with the fastest nats.go loop: publishing
// asynchronously as rawPublishRate does; consuming with Fetch of
// rawBestFetch messages, each acked without waiting. Use a fixed count:
//
//	go test -run '^$' -bench Defaults -benchtime 20000x ./adapters/nats/
func BenchmarkDefaults(b *testing.B) {
	relaytest.DefaultsRatio(b, relayPublishRate, rawPublishRate, relayDefaultConsumeRate,
		func(b *testing.B, n int) float64 { return rawFetchRate(b, n, rawBestFetch) })
}

// rawBestFetch is the best raw loop's Fetch size (JetStream's default
// max_ack_pending).
const rawBestFetch = 1000

func relayDefaultConsumeRate(b *testing.B, n int) float64 {
	_, js := rawJS(b)
	topic := newName("bench.consume.")
	defer benchStream(b, js, topic)()
	sub := openSub(b, newName("g"))
	relaytest.Provision(b, sub.(relay.Provisioner), topic)
	fill(b, js, topic, n)
	return relaytest.AckLoopRate(b, sub, topic, n, nil)
}
