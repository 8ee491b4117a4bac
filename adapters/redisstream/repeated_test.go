package redisstream_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// An entry with repeated fields, written by a foreign producer with a raw
// XADD, keeps every value on each of the three ways a subscription reads
// entries (new entries, entries taken over from a dead consumer, its own
// pending entries after a restart), with RESP2 and RESP3 connections.
func TestRepeatedFieldsKeepEveryValue(t *testing.T) {
	fields := []any{
		"id", "ext-1", "id", "ext-1-again",
		"payload", "first", "payload", "second",
		"md:x", "1", "md:x", "2",
		"a", "1", "a", "2", "a", "3",
	}
	want := relay.Metadata{"id#2": "ext-1-again", "payload#2": "second", "x": "1", "x#2": "2", "a": "1", "a#2": "2", "a#3": "3"}
	check := func(t *testing.T, m *relay.Message) {
		t.Helper()
		if m.ID != "ext-1" || string(m.Payload) != "first" || !maps.Equal(m.Metadata, want) {
			t.Errorf("got ID %q payload %q md %q; want ext-1 first %q", m.ID, m.Payload, m.Metadata, want)
		}
		if err := m.Ack(); err != nil {
			t.Error(err)
		}
	}
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			ctx := context.Background()
			opts, err := redis.ParseURL(redisURL(t))
			if err != nil {
				t.Fatal(err)
			}
			opts.Protocol = proto
			c := redis.NewClient(opts)
			t.Cleanup(func() { _ = c.Close() })
			raw := rawClient(t)
			topic, group, name := relaytest.Unique("repeated"), relaytest.Unique("g"), relaytest.Unique("worker")
			t.Cleanup(func() { raw.Del(ctx, topic) })
			sub, err := redisstream.NewSubscriber(ctx, c, redisstream.SubscriberConfig{
				Group: group, Consumer: name, ClaimIdle: 100 * time.Millisecond, ClaimEvery: 50 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Close() })
			provision(t, sub, topic)
			read := func(consumer string) {
				t.Helper()
				if err := raw.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: fields}).Err(); err != nil {
					t.Fatal(err)
				}
				res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{topic, ">"}, Count: 1, Block: -1}).Result()
				if err != nil || len(res[0].Messages) != 1 {
					t.Fatalf("raw read: %v %v", res, err)
				}
			}
			read(name)          // pending for this consumer: the own-PEL read
			read("dead-worker") // pending for a dead one: XAUTOCLAIM
			if err := raw.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: fields}).Err(); err != nil {
				t.Fatal(err) // new: XREADGROUP >
			}
			ch, _ := relaytest.Subscribe(t, sub, topic)
			for _, what := range []string{"own pending entry", "entry of a dead consumer", "new entry"} {
				check(t, relaytest.Next(t, ch, what))
			}
			_ = sub.Close()
			if n := pendingCount(t, raw, topic, group); n != 0 {
				t.Errorf("%d entries still pending", n)
			}
		})
	}
}

// Rule 2: a nil and an empty Payload are written alike, as a present
// 0-byte "payload" field, and both read back (as does an entry without a
// payload field) as a non-nil empty Payload.
func TestNilAndEmptyPayload(t *testing.T) {
	ctx := context.Background()
	topic, group := relaytest.Unique("empty"), relaytest.Unique("g")
	raw := rawClient(t)
	pub := openPub(t)
	sub := openSub(t, group)
	provision(t, sub, topic)
	nilMsg := &relay.Message{ID: relay.NewID()}
	emptyMsg := &relay.Message{ID: relay.NewID(), Payload: []byte{}}
	relaytest.Publish(t, pub, topic, nilMsg, emptyMsg)
	foreignID, err := raw.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []any{"source", "no payload field"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	res, err := raw.Do(ctx, "XRANGE", topic, "-", "+", "COUNT", 2).Slice()
	if err != nil || len(res) != 2 {
		t.Fatalf("XRANGE: %v %v", res, err)
	}
	for i, e := range res {
		fields := e.([]any)[1].([]any)
		var payload any = "absent"
		for j := 0; j+1 < len(fields); j += 2 {
			if fields[j] == redisstream.FieldPayload {
				payload = fields[j+1]
			}
		}
		if payload != "" {
			t.Errorf("entry %d: payload field %#v on the wire, want a present empty string", i, payload)
		}
	}
	ch, _ := relaytest.Subscribe(t, sub, topic)
	for _, want := range []string{nilMsg.ID, emptyMsg.ID, foreignID} {
		m := relaytest.Next(t, ch, "empty payload")
		if m.ID != want || m.Payload == nil || len(m.Payload) != 0 {
			t.Errorf("got %s payload %#v, want %s with a non-nil empty payload", m.ID, m.Payload, want)
		}
		_ = m.Ack()
	}
}
