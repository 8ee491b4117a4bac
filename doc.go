// Package relay is one publish/subscribe interface for Go services over
// RabbitMQ, Kafka, Amazon SQS/SNS, Redis Streams, PostgreSQL, NATS
// JetStream, Google Cloud Pub/Sub, MQTT, SQLite (a durable queue in a file,
// no server) and an in-process backend.
//
// A service codes against [Publisher] and [Subscriber] and picks the broker
// with a URL at start-up:
//
//	pub, err := relay.OpenPublisher(ctx, "mem://demo")
//	sub, err := relay.OpenSubscriber(ctx, "mem://demo?group=billing")
//
// Backends register their URL schemes when their package is imported, like
// database/sql drivers, so a program blank-imports the adapters it offers:
//
//	import _ "github.com/go-relay/relay/adapters/memory"
//
// The adapters of this module and the schemes they register:
//
//	adapters/memory       mem://
//	adapters/amqp         amqp://, amqps://
//	adapters/kafka        kafka://
//	adapters/redisstream  redis://, rediss://
//	adapters/sqs          sqs://, sns://
//	adapters/postgres     postgres://, postgresql://
//	adapters/nats         nats://
//	adapters/sqlite       sqlite://
//	adapters/gcppubsub    gcppubsub://
//	adapters/mqtt         mqtt://, mqtts://
//
// [Schemes] lists those a program registered.
//
// Delivery is at-least-once: a message is removed from its group only after
// [Message.Ack]. Every subscriber is opened for one group; subscribers of one
// group compete for messages and every group receives its own copy.
//
// The root package imports no broker client and holds only what
// applications use. Adapter authors build on package driver and the
// conformance suite in driver/drivertest.
package relay
