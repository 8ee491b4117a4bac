// Package reqreply is request/reply over any relay backend: a Requester
// publishes a request and waits for the one reply that carries its
// correlation ID, and Handler turns a function that answers a request into
// a router.Handler that publishes the answer back to the requester.
//
// How the reply travels depends on the publisher given to NewRequester:
//
//   - A publisher that implements DirectReplier (the amqp:// adapter) gives
//     the requester a broker-native reply channel: RabbitMQ's direct
//     reply-to (amq.rabbitmq.reply-to), consumed without acks on the channel
//     that publishes the requests. Nothing is declared and nothing is left
//     behind.
//   - Elsewhere the requester creates a reply topic of its own (a unique
//     name, "relay-reply-" and a random suffix), provisions and subscribes
//     to it with the subscriber given to NewRequester, and removes it on
//     Close where the subscriber implements TopicRemover. A requester that
//     dies without Close leaves that topic behind; docs/requestreply.md
//     says what it is on each backend.
//
// The wire format is three metadata keys (ReplyToKey, CorrelationIDKey,
// ErrorKey). On amqp:// the first two are the AMQP reply_to and
// correlation_id properties, so a plain AMQP client that sets them is
// answered by a relay server, and a plain AMQP server that publishes to
// reply_to with the correlation_id copied answers a relay requester.
//
// Delivery is at least once, like everything in relay: a server may handle
// a request twice (a redelivery after a crash), and the requester keeps the
// first reply and counts any other as late (Stats).
package reqreply
