// Package nats is the NATS JetStream backend (nats://), built on
// github.com/nats-io/nats.go and its jetstream package over relay's shared
// driver layer. The server must run with JetStream enabled (nats-server
// -js); nats-server 2.9 or newer.
//
// Mapping:
//
//   - A topic is a NATS subject (dot-separated tokens, no wildcards) and
//     has a stream of its own, created by the first Publish, Provision or
//     Subscribe: name [StreamName](topic) ("relay_" + the topic, with
//     characters a stream name cannot hold replaced and a hash suffix
//     then), subjects = the topic, limits from the URL (storage, replicas,
//     max_age, max_msgs, max_bytes, duplicate_window). An existing stream
//     is used as it is, never changed. With stream=NAME the adapter uses
//     that stream, which the user manages, and creates none.
//   - A group is a durable pull consumer of the topic's stream, named
//     [ConsumerName](group) (on a stream= stream, which may hold several
//     topics, ConsumerName(group+"_"+topic)), filtered to the topic, with
//     explicit acks, starting at the stream's first message. Subscribers of
//     a group on several processes share its messages; an existing
//     consumer is used with its own settings.
//
// Publishing sends each message asynchronously (PublishMsgAsync) and waits
// for every ack of the batch within the Publish ctx. The relay message ID
// is the Nats-Msg-Id header, so JetStream's duplicate window turns a
// retried publish into one stored message; a publish whose ack did not
// come (timeout, no stream answering, the connection reconnecting) is
// sent again by the shared publisher (package driver), with backoff,
// until ctx ends.
//
// A silent network (packets dropped, no reset) is noticed by the client's
// pings: one every ping_interval (default 20s), the connection declared
// dead after 2 unanswered, so within about 3 × ping_interval; Health then
// reports the connection as reconnecting until it is back.
//
// Consuming keeps one pull request outstanding for the subscription's
// free window slots and hands out each message as it arrives; the request
// expires after fetch_wait and the next asks for what is free then (see
// docs/nats.md). A subscription's window is at most half the consumer's
// max_ack_pending, which relay sets to the largest window × MembersPerGroup
// (at least 1000) when it creates the consumer. Acks are +ACK, Nack is
// -NAK (the group gets the message at once), NackAfter(d) is -NAK with delay d, held
// by the server even if the subscription or the process ends. Messages in
// work have their ack_wait lease reset (+WPI) every ack_wait/3. When a
// subscription ends, its unsettled messages are -NAKed so the group gets
// them at once. Attempt is the server's delivery count.
//
// Headers: ID in Nats-Msg-Id, Key in Relay-Key, each metadata entry in
// "Relay-M-<name>"; names and values that a NATS header cannot carry as
// they are (non-ASCII, control characters, blanks at either end, the
// characters nats.go refuses in names) go base64 in Relay-Id-B64,
// Relay-Key-B64 and "Relay-Mx-<base64url name>", so everything round-trips
// byte-exact. Metadata named "ce-..." or "Content-Type" (the CloudEvents
// NATS binding's headers) is the header of that name when it is
// header-safe.
// A message from another publisher is delivered with every
// header as metadata under its own name; a repeated header's 2nd, 3rd, ...
// values are kept as "<name>#2", "<name>#3", ... (the next free number
// when that name is taken); without Nats-Msg-Id its ID is
// "nats:<stream>:<stream sequence>".
//
// # Delayed delivery
//
// nats-server before 2.12 has no message scheduling, so a message with a
// Message.DeliverAt in the future is stored in the topic's stream at once,
// carrying its due time in the metadata header relay-deliver-at
// (driver.DeliverAtHeader, RFC 3339), and the shared subscription layer
// holds it (driver.DueHolder): a subscription that receives it before it
// is due -NAKs it with the time remaining as delay, without delivering it
// or taking a window slot, and delivers it once due, without the header.
// Capabilities.DelayedDelivery is relay.DelayEmulated, with no maximum.
// The server keeps the -NAK delay in the consumer, so the hold outlives
// the subscription and the process; a message that falls due while no
// subscriber runs is delivered by the next one at once. What it costs:
// every hold is a delivery in JetStream's count (max_deliver= counts
// holds; Attempt has this Subscriber's holds taken off, see
// driver.DueHolder for what it cannot know), a held message counts in
// Lag and in max_ack_pending while it waits (so more than max_ack_pending
// delayed messages waiting stall the group's deliveries until the
// earliest fall due), and a consumer that is not
// relay (nats CLI, another client) sees it at once, header and all.
package nats
