package mqtt_test

import (
	"testing"

	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// BenchmarkDefaults compares relay at its defaults (a subscriber URL with
// a group and nothing else) with paho on a mosquitto at its own defaults
// (max_queued_messages 0 only, so that a backlog is kept whole): the same
// loops as BenchmarkRatio, which are already the fastest paho allows (QoS
// 1 publishes whose PUBACKs are awaited per batch of 100; a persistent
// shared-subscription session acking each message). Use a fixed count:
//
//	go test -run '^$' -bench Defaults -benchtime 20000x ./adapters/mqtt/
func BenchmarkDefaults(b *testing.B) {
	broker := testenv.StartMosquitto(b, "max_queued_messages 0")
	relaytest.DefaultsRatio(b,
		func(b *testing.B, n int) float64 { return relayPublishRate(b, broker.URL(), n) },
		func(b *testing.B, n int) float64 { return rawPublishRate(b, broker.URL(), n) },
		func(b *testing.B, n int) float64 { return relayConsumeRateWith(b, broker.URL(), n) },
		func(b *testing.B, n int) float64 { return rawConsumeRate(b, broker.URL(), n) })
}
