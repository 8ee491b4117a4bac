package relay

// Metadata keys of request/reply (package reqreply), defined here so that
// adapters can map them to native broker fields without importing reqreply:
// on amqp:// they are the AMQP reply_to and correlation_id properties, in
// both directions, so that non-relay AMQP clients and servers interoperate.
// Elsewhere they travel as ordinary metadata under these names.
//
// MetaCorrelationID is not middleware.CorrelationIDKey ("correlation_id"),
// which traces a chain of messages; this one pairs a reply with its request.
const (
	// MetaReplyTo names where the reply to a request goes: a topic, or
	// the broker's reply address (amq.rabbitmq.reply-to on RabbitMQ).
	MetaReplyTo = "reply-to"
	// MetaCorrelationID is set on a request by the requester and copied
	// onto the reply by the server.
	MetaCorrelationID = "correlation-id"
)
