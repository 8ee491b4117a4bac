// Package redisstream is the Redis Streams backend (redis:// and rediss://),
// built on github.com/redis/go-redis/v9. It needs Redis 6.2 or newer (or a
// compatible server such as Valkey); opening a subscriber against an older
// server fails with a message saying so.
//
// Mapping:
//
//   - A topic is one stream, whose key is Prefix+topic.
//   - A group is a Redis consumer group, created with MKSTREAM by Provision
//     or Subscribe. A new group starts at Start: "0" (default, the whole
//     retained stream) or "$" (only entries added afterwards).
//   - Each subscription is one consumer of the group. Its name is the
//     configured Consumer (default "<hostname>-<pid>"), suffixed "-2", "-3",
//     ... when the same process runs several subscriptions of one stream and
//     group, so names are stable and unique per process.
//
// Publishing pipelines one XADD per message and sends a whole batch in one
// round trip; optional MAXLEN ~ or MINID ~ trimming bounds the stream.
//
// Entries are written as plain fields that redis-cli XRANGE shows readably:
// "id" (the relay message ID), "key" (only when non-empty), "payload", and
// one "md:<name>" field per metadata entry. An entry written by another
// producer is still delivered, never rejected, with every value of a
// repeated field: see [DecodeFields].
//
// Consuming reads with XREADGROUP COUNT <free window slots> BLOCK, so up to
// InFlight messages are held at once. Acks become one XACK per batch. A Nack
// (and the release of unsettled messages when a subscription ends) hands the
// entry back to the group: it is moved to the consumer "relay-handback"
// with its idle time set to the maximum, where the next XAUTOCLAIM of any
// consumer of the group takes it, immediately for the subscription that
// nacked it and within ClaimEvery for the others. NackAfter(d) is native
// for d up to ClaimIdle (Capabilities().MaxDelay): the hand-back sets the
// entry's idle time to ClaimIdle-d, so XAUTOCLAIM takes it only after d,
// even if the subscription or the process ends meanwhile, and the entry
// holds no window slot while it waits; the subscription that nacked claims
// it when it is due. Longer delays are emulated. Attempt is the entry's
// delivery counter in the group's pending entries list, so it survives
// consumer restarts.
//
// Entries that a crashed consumer left pending are taken over by XAUTOCLAIM
// once they have been idle longer than ClaimIdle. While a handler works on
// a message its idle time is reset every ClaimIdle/3 (XCLAIM ... JUSTID to
// the same consumer), so slow work is not stolen. All consumers of a group
// should use the same ClaimIdle.
//
// A message with a Message.DeliverAt in the future (emulated delayed
// delivery) is ZADDed to the sorted set Prefix+topic+DelayedSuffix instead,
// scored by its due time; while a subscriber has a subscription of the
// topic, it moves due members into the stream with an atomic Lua script on
// the server's clock, at most DelayPoll late. See docs/redis.md.
//
// After a Redis restart the subscription reconnects with backoff and, when
// the group is gone (a server without persistence), recreates it from "0" so
// that entries published since the restart are not skipped.
package redisstream
