package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// BenchmarkDefaults compares relay at its defaults (a subscriber URL with
// a group and nothing else) with the fastest go-redis loop: publishing
// pipelines XADDs in batches of 100 (rawPublishRate); consuming reads
// XREADGROUP COUNT 1000 and pipelines each batch's XACK with the next
// read. Use a fixed count:
//
//	go test -run '^$' -bench Defaults -benchtime 50000x ./adapters/redisstream/
func BenchmarkDefaults(b *testing.B) {
	relaytest.DefaultsRatio(b, relayPublishRate, rawPublishRate,
		func(b *testing.B, n int) float64 { return relayConsumeRateWith(b, n) }, rawBestConsumeRate)
}

// rawBestCount is the best raw loop's XREADGROUP COUNT.
const rawBestCount = 1000

func rawBestConsumeRate(b *testing.B, n int) float64 {
	ctx := context.Background()
	raw := rawClient(b)
	topic, group := relaytest.Unique("bench-consume"), relaytest.Unique("g")
	defer raw.Del(ctx, topic)
	if err := raw.XGroupCreateMkStream(ctx, topic, group, "0").Err(); err != nil {
		b.Fatal(err)
	}
	fill(b, raw, topic, n)
	var ids []string // the previous batch's, acked with the next read
	start := time.Now()
	for got := 0; got < n; {
		var read *redis.XStreamSliceCmd
		_, err := raw.Pipelined(ctx, func(p redis.Pipeliner) error {
			if len(ids) > 0 {
				p.XAck(ctx, topic, group, ids...)
			}
			read = p.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: group, Consumer: "raw", Streams: []string{topic, ">"}, Count: rawBestCount, Block: time.Second,
			})
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		res := read.Val()
		ids = ids[:0]
		for _, m := range res[0].Messages {
			if p, _ := m.Values["payload"].(string); len(p) != relaytest.RatioPayload {
				b.Fatal("bad payload")
			}
			ids = append(ids, m.ID)
		}
		got += len(ids)
	}
	if err := raw.XAck(ctx, topic, group, ids...).Err(); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}
