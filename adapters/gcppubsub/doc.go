// Package gcppubsub is the Google Cloud Pub/Sub backend, on the raw API
// clients of cloud.google.com/go/pubsub/v2.
//
// Import it for its URL scheme:
//
//	import _ "github.com/go-relay/relay/adapters/gcppubsub"
//
//	pub, _ := relay.OpenPublisher(ctx, "gcppubsub://my-project")
//	sub, _ := relay.OpenSubscriber(ctx, "gcppubsub://my-project?group=billing")
//
// The URL's host is the project. Credentials are Application Default
// Credentials unless credentials= names a service account key file;
// emulator=host:port (or PUBSUB_EMULATOR_HOST) reaches an emulator or
// pstest over plaintext gRPC, endpoint=host:port another endpoint (a
// regional one, for ordering keys). docs/gcppubsub.md has every parameter.
//
// # Mapping
//
// A relay topic is a Pub/Sub topic of the same ID (3-255 letters, digits
// and - _ . ~ + %, starting with a letter; anything else is refused with
// relay.ErrInvalidTopic). A group is one subscription per topic, named
// SubscriptionID(topic, group), "<topic>-<group>": created with the
// topic by Provision and Subscribe when missing (ack_deadline=, never
// expiring, with message ordering under ordered=true, with a dead-letter
// policy under max_delivery_attempts=), used as it is when it exists,
// except that one bound to another topic, or without ordering under
// ordered=true, is refused. Pub/Sub keeps messages for existing
// subscriptions only: publish after Provision.
//
// # Encoding
//
// The data is the payload and Key the ordering key (at most 1024 bytes of
// UTF-8, or Publish refuses it). The ID travels in the attribute AttrID,
// each metadata entry in an attribute of its own name when Pub/Sub can
// carry it (100 attributes, names up to 256 bytes, values up to 1024,
// UTF-8, no "goog" prefix); the rest is packed before the payload and
// AttrPacked gives its length, so nothing is dropped. Messages from other
// publishers are delivered with Pub/Sub's message ID as ID and their
// attributes as metadata.
//
// # Publishing and consuming
//
// Publish sends Publish requests of up to 1000 messages and 9.5 MB; the
// shared layer (package driver) retries failed requests with its one
// backoff policy. Subscriptions make Pull calls (pullers= at once,
// default 1, each for what the in-flight window has free, up to 1000),
// Acknowledge acks
// and ModifyAckDeadline nacks: deadline 0 for Nack and a release, the
// delay for NackAfter (at most 600 s, Capabilities().MaxDelay), the ack
// deadline again every min(ack_deadline, 10 s)/3 for messages in work.
// Attempt is Pub/Sub's DeliveryAttempt where the subscription has a
// dead-letter policy; without one Pub/Sub counts nothing and the
// subscriber counts the deliveries it nacked or released
// (driver.AttemptMemo). Message.DeliverAt is held by the subscriptions
// with that native NackAfter until due (driver.DueHolder). Lag is not
// reported: the API does not count a subscription's backlog.
package gcppubsub
