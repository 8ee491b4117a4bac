// Package watermill connects relay and Watermill
// (github.com/ThreeDotsLabs/watermill) both ways. It is a module of its
// own, so relay's main module does not depend on Watermill.
//
// # relay under Watermill
//
// NewPublisher and NewSubscriber turn any relay.Publisher and
// relay.Subscriber (mem://, amqp://, kafka://, redis://, sqs://, nats://,
// postgres://, gcppubsub://, or a third-party adapter) into a Watermill
// message.Publisher and message.Subscriber, so Watermill's router, CQRS
// and middleware run on relay's adapters unchanged:
//
//	p, _ := relay.OpenPublisher(ctx, "redis://127.0.0.1:6379/0")
//	s, _ := relay.OpenSubscriber(ctx, "redis://127.0.0.1:6379/0?group=billing")
//	router.AddHandler("h", "orders", relaywm.NewSubscriber(s, relaywm.Options{}),
//		"invoices", relaywm.NewPublisher(p, relaywm.Options{}), handler)
//
// # Watermill under relay
//
// NewBackendPublisher and NewBackendSubscriber turn a Watermill Pub/Sub
// into a relay backend, so relay's router, bridge and CLI reach brokers
// only Watermill supports; Register names one as a URL scheme,
// watermill+NAME://, for relay.OpenPublisher, relay.OpenSubscriber and
// the bridge config. The caller declares the Pub/Sub's capabilities in
// BackendConfig: relay cannot ask Watermill what it guarantees.
//
// # How the models map
//
//	relay                      Watermill
//	Message.ID                 Message.UUID (an empty UUID gets relay's UUIDv7)
//	Message.Key                metadata entry KeyMetadata (default "relay_key")
//	Message.Metadata           Message.Metadata (the key entry aside)
//	Message.Payload            Message.Payload (shared, not copied)
//	Ack / Nack                 Ack / Nack
//	NackAfter(d)               NackAfter(m, d) here, or Options.NackDelay; under relay: emulated
//	Attempt()                  Attempt(m) here; under relay: counted in process
//	Topic(), Context()         RelayMessage(m).Topic(); m.Context() is the relay message's
//	(a ctx-only handler)       RelayMessageFromContext(ctx), e.g. in a CQRS handler
//	Provisioner.Provision      SubscribeInitializer.SubscribeInitialize
//	Publish(ctx, ...)          Publish(topic, ...): each message's Context bounds it
//
// What cannot be mapped:
//
//   - Watermill has no key, no attempt count, no delayed Nack and no
//     topic on a message: the key travels as a metadata entry, and
//     Attempt, NackAfter and Topic are reached through RelayMessage.
//     Under relay, Attempt is counted per subscription in process (a
//     redelivery to another process starts again at 1) and NackAfter is
//     emulated by holding the message unsettled at Watermill.
//   - Watermill delivers one message of a subscription at a time, the
//     next after the previous was acked; relay holds a window of them.
//     The Subscriber keeps Watermill's model (relay reads ahead up to its
//     window, so a Nacked message may come back after messages already
//     read ahead; use inflight=1 where that matters). Under relay, most
//     Watermill subscribers hold back the next message while one is
//     unsettled, so relay's window buys little.
//   - Watermill's Ack and Nack return a bool: relay's settlement errors
//     (ErrSubscriptionEnded after the subscription ended) are logged, and
//     such a message is redelivered.
//   - Watermill's Publish has no ctx and cannot say which messages of a
//     failed call were sent; relay's PublishError names them. Under relay
//     every message of a failed Watermill call counts as failed.
//   - A message's context does not cross a broker (Watermill's
//     ContextPreserved is false), and neither does the Go value it holds.
//   - Groups: the Subscriber receives for the group the relay subscriber
//     was opened for; under relay, the group is whatever the Watermill
//     subscriber was configured with (Register passes group= to the
//     factory).
//   - What a Watermill Pub/Sub guarantees (durability, order, redelivery
//     to another consumer after a subscription ended) is its own; the
//     capabilities given in BackendConfig must say it honestly.
//
// Ownership: each wrapper owns what it wraps; its Close closes it.
//
// The module's tests run Watermill's universal Pub/Sub tests
// (pubsub/tests.TestPubSub) against mem://, redis://, amqp:// and kafka:// through
// NewPublisher and NewSubscriber, and relay's conformance suite
// (driver/drivertest) against Watermill's GoChannel registered as
// watermill+gochannel-test://. See docs/watermill.md.
package watermill
