// Package gcppubsub is the Google Cloud Pub/Sub backend, on the raw API
// clients of cloud.google.com/go/pubsub/v2 (Publish, Pull, Acknowledge,
// ModifyAckDeadline) under relay's shared driver layer:
//
//	import _ "github.com/go-relay/relay/adapters/gcppubsub"
//
//	pub, _ := relay.OpenPublisher(ctx, "gcppubsub://my-project")
//	sub, _ := relay.OpenSubscriber(ctx, "gcppubsub://my-project?group=billing")
//
// A relay topic is the Pub/Sub topic of that ID; a group is one
// subscription per topic, SubscriptionID(topic, group), created with its
// topic by Provision or Subscribe. Pub/Sub keeps messages only for
// subscriptions that exist when they are published. Key is the ordering
// key (ordered=true orders a key's deliveries), the ID travels in
// AttrID, metadata in attributes and what they cannot carry is packed
// (AttrPacked). NackAfter, release and lease extension are
// ModifyAckDeadline calls; Attempt is Pub/Sub's count under a dead-letter
// policy (max_delivery_attempts=) and the subscriber's own otherwise. Lag
// is not reported. docs/gcppubsub.md is the reference.
package gcppubsub
