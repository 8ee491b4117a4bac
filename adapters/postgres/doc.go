// Package postgres is the PostgreSQL backend (postgres:// and
// postgresql://), built on github.com/jackc/pgx/v5 (pgxpool). It needs
// PostgreSQL 9.5 or newer (FOR UPDATE SKIP LOCKED); it is tested on 15.
//
// # Tables
//
// Everything lives in one schema (Schema, schema=; default "relay"),
// created by publisher open, Provision and Subscribe from the embedded
// schema.sql (SchemaSQL, SchemaFor), idempotently (CREATE ... IF NOT
// EXISTS) and under a transaction-scoped advisory lock so that processes
// starting together do not race:
//
//   - groups (topic, name): one row per group of a topic, made by
//     Provision or the group's first Subscribe.
//   - messages (id bigserial, topic, relay_id, key, md_keys text[],
//     md_values text[], payload bytea, created_at): each published message
//     once. Metadata is two arrays of equal length, sorted by name.
//   - deliveries (topic, group_name, message_id, visible_at, attempts,
//     lease_holder), primary key (topic, group_name, message_id): one row
//     per group and message not yet acknowledged by that group.
//
// Indexes: the deliveries primary key serves the claim (one group's
// rows of a topic in message order, filtered on visible_at) and the
// settlements; deliveries(message_id) serves retention (is a message row
// still needed?); messages(topic, id) serves the retention sweep.
//
// # Publishing and fan-out
//
// Publishing inserts, per message, the messages row and one deliveries
// row for every group of the topic in one statement (nothing at all when
// the topic has no group), and the whole batch (up to 1000 messages) plus
// a NOTIFY in one transaction, pipelined in one round trip. A group thus
// receives exactly the messages published after its groups row exists:
// messages published before a group is created are not kept for it, and
// a topic without groups keeps nothing (Capabilities.RetainedBeforeGroup).
// Provision creates the group ahead of its first Subscribe.
//
// # Transactional outbox
//
// PublishTx (pgx) and PublishSQLTx (database/sql over pgx's stdlib driver)
// run the same inserts inside the caller's transaction: the message is
// stored iff the business write commits, and the NOTIFY goes out on
// commit. A postgres:// subscriber (for instance a bridge route source)
// then forwards it to any broker. See Outbox for another schema.
//
// # Consuming
//
// A subscription claims up to its free window slots (InFlight, inflight=)
// of its group's claimable rows (visible_at <= now()) in message order with
// SELECT ... FOR UPDATE SKIP LOCKED, so competing consumers never claim
// the same row, and leases each: visible_at = now() + Lease (lease=,
// default 30s), attempts + 1, lease_holder = the subscription's token.
// The shared layer extends the leases of held messages every Lease/3, so
// only a crashed or hung consumer's messages come back, after its lease.
//
// When nothing is claimable the subscription waits for a notification:
// each subscriber holds one connection that LISTENs on the channel
// relay_<schema>, and publishing (and Nack, and the release at
// subscription end) notifies with the topic as payload, so delivery
// latency is a round trip, not a polling period. Poll (poll=, default 1s)
// is only a fallback for expired leases, delays nacked by other
// subscriptions and notifications lost while the LISTEN connection was
// down (after reconnecting it wakes every subscription). The LISTEN
// connection pings the server after PingInterval (ping_interval=, default
// 10s) without a notification and counts itself lost when the ping is not
// answered within PingInterval either, so Health reports a silent network
// within about twice PingInterval.
//
// Ack deletes the delivery row, and message rows that no group needs any
// more are deleted: those just acked, in the ack's transaction (the acked
// message rows are locked first, so that when several groups ack the same
// message at once the last one to commit removes it), and on each
// Subscribe a bounded sweep of at most 1000 leftovers of the topic.
// Nack makes the row claimable at once (visible_at = now()); NackAfter(d)
// is native (visible_at = now() + d, no upper bound): the delay holds
// across the end of the subscription and of the process, and the message
// holds no window slot meanwhile. Settlements are batched into one
// transaction, sent in one round trip, per flush. Attempt is the row's attempts column, counted by
// the database (AttemptFromBroker). When a subscription ends, its
// unsettled rows are released (visible_at = now(), lease cleared) and the
// group is notified.
//
// # Delayed delivery
//
// A message with a Message.DeliverAt in the future is stored like any
// other, its delivery rows with visible_at = clock_timestamp() + the
// delay (rounded up to the microsecond), so no claim takes it before
// then (Capabilities.DelayedDelivery is relay.DelayNative, with no
// maximum). PublishTx and PublishSQLTx do the same: the delay counts from
// the insert, not from the start of the caller's transaction, and the
// row is invisible until commit anyway. It is the database that holds
// the message: publisher and subscribers may all restart meanwhile.
// A subscription that finds nothing claimable asks the database when the
// group's next row becomes claimable (min(visible_at) over its rows not
// claimable now: a scan of the group's waiting rows, only when idle) and
// wakes then, so a due message is claimed within a round trip, not a
// poll period. Due delayed messages are claimed in message id order
// (publish order), like the rest.
//
// # Ordering
//
// A group's rows are claimed in message id order, which is commit order
// for publishers that wait for each Publish. With one subscription per
// group messages are delivered in publish order, per topic and therefore
// per key, while no redelivery intervenes (relay.OrderPerTopic). Competing
// subscriptions claim disjoint batches and process them concurrently, so
// across them no order holds; a Nack or an expired lease puts a message
// back at its place in id order, before later ones not yet claimed.
//
// # Limits
//
// MaxBytes (max_bytes=) bounds payload plus ID, Key and metadata; default
// 64 MiB, at most 512 MiB (PostgreSQL fields hold up to 1 GB, but the
// whole row passes through memory on both sides). ID, Key, metadata
// names and values and topics are PostgreSQL text: a NUL byte or invalid
// UTF-8 is rejected at publish time with a *relay.LimitError; payloads are
// bytea and byte-exact. Rows written by hand with a repeated metadata name
// are delivered with every value (see DecodeMetadata).
package postgres
