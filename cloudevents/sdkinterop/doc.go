// Package sdkinterop holds the tests that check relay's cloudevents
// package against the CloudEvents Go SDK (github.com/cloudevents/sdk-go/v2)
// on Kafka and RabbitMQ: events the SDK encodes are read by relay, and
// events relay writes are read by the SDK. It is a module of its own so
// that the SDK and its dependencies stay out of relay's go.mod; it has no
// code besides its tests.
package sdkinterop
