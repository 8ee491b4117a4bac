// Package kafka is the Kafka backend (kafka://host:9092), built on
// github.com/twmb/franz-go. Import it for its side effect of registering
// the scheme:
//
//	import _ "github.com/go-relay/relay/adapters/kafka"
//
// URL: kafka://host:port?seed=host2:port&group=G&... Every field of
// Config, PublisherConfig and SubscriberConfig is a query parameter (see
// the field docs and docs/kafka.md); an unknown parameter is an error.
//
// # Publishing
//
// The producer is idempotent with acks=all by default. A message is one
// record: Key is the record key (so it picks the partition), Payload the
// value, ID and Metadata are headers (see the wire format in codec.go).
// Publish produces the whole batch asynchronously and returns once every
// record is acknowledged, or ctx ends; failed messages are named in a
// *relay.PublishError. Missing topics are created with the configured
// partitions and replication (create_topics=false turns this off).
//
// # Subscribing
//
// A subscriber is one member of its Kafka consumer group for all the
// topics it subscribes to: one kgo client, to which each Subscribe adds
// its topic (AddConsumeTopics) and from which the end of a subscription
// purges it again. Adding or removing a topic rebalances the member; it
// never makes a sibling subscription fail, and with the default
// cooperative-sticky balancer the other topics' partitions stay where
// they are. A second concurrent subscription of a topic the subscriber
// already consumes joins as another member and competes with the first.
// Each subscription has its own window: up to InFlight messages are
// unsettled at a time, across its topic's partitions (unset: 256, growing
// to 1024 while the handler keeps up), with up to two more of the largest
// windows fetched ahead; a topic whose fetched-ahead records wait over a
// second for a slow or stuck subscription is paused, so that it holds
// back the member's other topics for at most that second.
//
// A partition's offset is committed only up to the contiguous prefix of
// acked records: an ack of offset 12 never commits past an unacked 11.
// Commits are asynchronous (Ack does not wait) with one commit request
// in flight per subscription; the acked prefix is also committed when
// partitions are revoked and when the subscription ends, and its topic's
// partitions are then given up at once (the member leaves the group with
// its last topic), so another member takes them without waiting for the
// session timeout.
//
// When a subscription ends, every settlement made before has been
// committed (or failed after retries and was logged) and its unsettled
// records are released to the group at once. Kafka keeps a committed
// position per partition, not per-message acks, so acked records that
// follow an unsettled one in the same partition are delivered to the
// group again (Capabilities().AckedAfterUnsettledRedelivered). NackAfter
// is emulated (NativeDelay is false): a message waiting out its delay is
// released to the group at once when its subscription ends, and may come
// back before the delay.
//
// Nack redelivers the record from memory to this subscription before any
// new record, and the commit position stays below it until it is acked;
// NackAfter is emulated by the shared layer. Attempt is counted in process
// (Kafka has no delivery counter): it survives Nacks and rebalances inside
// one process, and restarts at 1 in another process.
//
// Ordering is per partition, hence per Key, while no redelivery
// intervenes. Records from foreign producers are delivered whatever their
// headers: without a relay-id header the ID is "kafka:TOPIC:PARTITION:OFFSET".
// A header name that repeats keeps every value: the first under its name,
// the 2nd, 3rd, ... as metadata "<name>#2", "<name>#3", ... (the next free
// number if another header has that name); a repeated relay-id is the ID
// once and metadata "relay-id#2" after that.
//
// # Delayed delivery
//
// A message with a Message.DeliverAt in the future (emulated delayed
// delivery) is produced to a delay bucket topic of its topic (DelayTopics)
// instead; while a subscriber has a subscription of the topic, it runs a
// mover (consumer group "relay-delay-mover.<topic>") that produces due
// records to the topic and commits a bucket offset only after that produce
// is acknowledged: at least once, never early, a crash may repeat a move.
// See docs/kafka.md.
//
// # Empty payloads and tombstones
//
// A nil or empty Payload is produced as a present 0-byte value, never as a
// NULL value. A tombstone (NULL value, for compacted topics) is produced
// only on request: metadata "kafka.tombstone" = "true" (MetadataTombstone)
// with an empty payload; the entry is not sent as a header. A received
// NULL value is an empty Payload with metadata "kafka.tombstone" = "true",
// so a bridge that re-produces it to Kafka writes a tombstone again. Any
// other value than "true" or "false", or a payload on a tombstone, fails
// Publish with a *relay.LimitError. A foreign header named
// "kafka.tombstone" is delivered as "kafka.tombstone#2".
//
// # Transactions and exactly-once
//
// Subscribers read with isolation=read_committed by default. TxPublisher
// (NewTxPublisher, OpenTxPublisher; transactional_id=) publishes to several
// topics in one transaction. NewExactlyOnce (or relay.OpenExactlyOnce with
// two kafka:// URLs of one cluster) opens a subscriber and publisher on one
// transact session, so a handler's outputs and its input's offsets commit
// atomically; router.WithGuarantee(relay.ExactlyOnce) and a bridge route's
// guarantee: exactly-once run on it. A second client with the same
// transactional_id fences the first (ErrFenced). See docs/kafka.md.
//
// # Groups that do not exist yet
//
// A group without a committed offset for a topic starts at the oldest
// retained record (start=earliest, the default), so messages published
// before its first Subscribe are delivered. With start=latest, Subscribe
// and Provision first commit the current end offsets for a new group, so
// that exactly the messages published from then on are delivered.
// Partitions that have no commit in a group that has others (for example
// partitions added later) always start at the oldest record.
package kafka
