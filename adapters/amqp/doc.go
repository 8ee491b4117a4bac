// Package amqp is the RabbitMQ backend (amqp:// and amqps://), built on
// github.com/rabbitmq/amqp091-go.
//
// Import it for its side effect to open URLs with relay.OpenPublisher and
// relay.OpenSubscriber:
//
//	import _ "github.com/go-relay/relay/adapters/amqp"
//
//	pub, err := relay.OpenPublisher(ctx, "amqp://guest:guest@localhost:5672/")
//	sub, err := relay.OpenSubscriber(ctx, "amqp://guest:guest@localhost:5672/?group=billing")
//
// or use NewPublisher and NewSubscriber with a Config.
//
// Topology: a topic is a durable exchange (fanout by default); a group is a
// durable queue "<topic>.<group>" bound to it, so every group gets a copy
// of each message and the consumers of one group share them. Publishing is
// confirmed and mandatory by default: a message no group queue is bound
// for fails with ErrUnroutable rather than being dropped. Subscriber.Provision
// creates a group's queue ahead of its first Subscribe.
//
// Semantics: at-least-once; per-topic order for a single consumer while no
// redelivery intervenes; Attempt from the broker's delivery count on quorum
// queues and from a relay header plus the redelivered flag on classic
// queues, where Nack and the release of unsettled messages republish a
// copy with the next attempt (with nack_mode=requeue requeues are counted
// in process); NackAfter through per-group delay queues (TTL +
// dead-lettering); Message.DeliverAt through per-topic due queues
// (the same TTL + dead-lettering, to the topic's exchange, four buckets
// per doubling of the delay; see topology.go); the connection is re-established with backoff and
// subscriptions resume, while Publish waits for it within its ctx. Every
// broker round trip is bounded by the caller's ctx: a broker that stops
// answering makes the call return with ctx's error and the connection is
// closed and redialled; Close is bounded (see docs/amqp.md). Non-string AMQP headers from
// other publishers (x-death, numbers, timestamps, tables) are delivered as
// string metadata. See docs/amqp.md for every URL option.
package amqp
