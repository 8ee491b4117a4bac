// Package cloudevents reads and writes CloudEvents (specification 1.0) as
// relay messages, on every backend.
//
// It is opt-in: nothing in relay changes for messages that are not
// encoded here. An [Event] becomes a [relay.Message] in the binary content
// mode of the backend's CloudEvents protocol binding: the event data is
// the payload, and each attribute is one metadata entry named with the
// binding's prefix ("ce_id" on Kafka, "cloudEvents_id" on RabbitMQ,
// "ce-id" on NATS). The event's id is the message ID and its partitionkey
// extension is the message Key. Backends without a binding (Redis
// Streams, SQS/SNS, PostgreSQL, mem://) use the NATS binding's rules.
// docs/cloudevents.md has the mapping table of every backend.
//
// [FromMessage] decodes a received message whatever the backend: it finds
// the binding from the attribute names, and it reads the structured
// content mode (content type application/cloudevents+json, the whole event
// as JSON in the payload) as well.
//
// Use [NewPublisher] to publish events through any relay.Publisher (it
// picks the binding from the publisher's Capabilities), or
// [Binding.ToMessage] to build the messages yourself, e.g. as the output
// of a router handler. [Publisher.PublishStructured] and
// [Binding.ToStructuredMessage] write the structured mode instead. On the receiving side, call FromMessage on the
// delivered message and settle that message as usual.
package cloudevents
