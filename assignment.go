package relay

// How the members of a group share a topic's work (Assignment.Mode).
const (
	// ShareCompeting: every member takes messages from one shared queue or
	// stream as it has room (Redis Streams groups, NATS durable consumers,
	// SQS, PostgreSQL SKIP LOCKED, RabbitMQ competing consumers): no member
	// owns a part of the topic.
	ShareCompeting = "competing"
	// SharePartitions: the group's coordinator assigns each partition to
	// one member (Kafka consumer groups); Assignment.Partitions is what
	// this member holds.
	SharePartitions = "partitions"
	// ShareSingleActive: one member at a time consumes the whole queue
	// (RabbitMQ single active consumer), the others wait to take over;
	// Assignment.Active says whether this member is the one.
	ShareSingleActive = "single-active"
)

// Assignment is what a member of a group holds of a topic's work now.
type Assignment struct {
	// Mode is one of the Share constants.
	Mode string
	// Partitions are the partitions this member holds (SharePartitions),
	// ascending; empty while it holds none (more members than partitions,
	// during a rebalance, or after it left the group).
	Partitions []int32
	// Active reports, for ShareSingleActive, whether this member is the
	// active consumer: it received a delivery since it subscribed (a
	// waiting member receives none).
	Active bool
}

// AssignmentReporter is implemented by subscribers that can tell what
// their member of the group holds of a topic's work (the bridge shows it
// per replica in /routes). Assignment does not call the broker and is
// safe for concurrent use; it returns an error wrapping ErrNotSupported
// when the backend cannot tell, or the topic is not subscribed.
type AssignmentReporter interface {
	Assignment(topic string) (Assignment, error)
}
