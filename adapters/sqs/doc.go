// Package sqs is the Amazon SQS and SNS backend, on aws-sdk-go-v2.
//
// Import it for its URL schemes:
//
//	import _ "github.com/go-relay/relay/adapters/sqs"
//
//	pub, _ := relay.OpenPublisher(ctx, "sqs://?region=eu-west-1")
//	sub, _ := relay.OpenSubscriber(ctx, "sqs://?region=eu-west-1")
//	pub, _ := relay.OpenPublisher(ctx, "sns://?region=eu-west-1")
//	sub, _ := relay.OpenSubscriber(ctx, "sns://?region=eu-west-1&group=billing")
//
// # sqs:// and sns://
//
// On sqs:// the topic is a queue name and the queue is the group of
// competing consumers: group= is rejected (use sns:// for a copy per
// group). The queue is created when missing (create_queues=false turns
// that off), as a FIFO queue when its name ends in ".fifo". Messages
// published before any subscriber are kept: the publisher creates the
// queue.
//
// On sns:// the topic is an SNS topic. A subscriber's group is an SQS
// queue "<topic>-<group>" ("<topic-without-.fifo>-<group>.fifo" for FIFO
// topics; shortened by [ShortenName] when longer than SQS's 80 characters,
// or named by Config.Queue, queue=), created, allowed to receive from the topic by a statement
// merged into its existing access policy (never replacing it), and
// subscribed with raw message delivery. SNS drops messages published
// before a group's subscription exists, so provision groups first
// (relay.Provisioner, or an earlier Subscribe). A relay topic longer than
// SNS's 256 characters maps to the SNS topic [ShortenName] gives.
//
// # Encoding
//
// ID, Key and Metadata travel as String message attributes (see AttrID
// and the others): at most ten per message, as SQS allows; what does not
// fit is packed as JSON into one attribute, never dropped. Attribute
// names are sanitised reversibly. A payload that is not text SQS accepts
// (binary, or empty) is sent base64-encoded and marked. The encoded size
// (body plus attribute names, types and values) is checked before
// anything is sent (*relay.LimitError). On FIFO queues and topics Key is
// the MessageGroupId (required: a message without Key is refused) and ID
// the MessageDeduplicationId; values outside the charset SQS allows are
// replaced by a stable hash, the original travelling in the attributes.
//
// Deliveries from other producers are delivered too: body as payload,
// attributes as metadata, the broker's message ID as ID; an SNS JSON
// envelope (a subscription without raw delivery) is unwrapped.
//
// # Publishing
//
// Publish packs messages into SendMessageBatch / PublishBatch calls of at
// most 10 entries and max_bytes in total and sends up to send_concurrency
// of them at once; on a FIFO topic calls holding the same message group
// are sent one after the other. An entry SQS or SNS refuses is reported
// in a *relay.PublishError naming the message (with an *EntryError);
// entries failed by a service fault (never on FIFO) and calls that failed
// in transit are sent again by the shared publisher (package driver), with
// backoff, until the Publish ctx ends. Where a service
// (an emulator) lacks a batch call, single calls are used instead.
//
// # Consuming
//
// Each subscription keeps pollers= ReceiveMessage calls in flight
// (default 4; 1 on FIFO queues), long-polling (wait=20s) for up to ten
// messages each: the shared layer runs them within its in-flight window
// (inflight=100), each asking for what the window has free. Each call is
// bounded by receive_timeout (default wait + 10s), so a network that went
// silent fails the call, Health reports it and the shared layer retries it
// with its backoff. Ack deletes with DeleteMessageBatch and Nack changes the
// visibility to 0 (or, for NackAfter, to the delay) with
// ChangeMessageVisibilityBatch, in calls of ten of the settlement batches
// of the shared layer, which lingers up to ack_linger for a batch to fill
// and retries a failed call. Attempt is SQS's
// ApproximateReceiveCount (or the receives this subscription counted, if
// that is higher, for emulators that do not count). The visibility of
// messages still being handled is extended every extend_every (default
// visibility/3), so slow work is not delivered twice; a receipt that
// stopped working is not extended again. When a subscription ends,
// unsettled messages, including those received ahead, are made visible
// at once. max_receive=N adds a dead-letter queue (dlq=, default
// "<queue>-dlq") through the queue's RedrivePolicy.
//
// NackAfter uses the visibility timeout, which SQS caps at 12 hours from
// the receipt: Capabilities().MaxDelay is 11 hours, and a delay that
// would end past the cap (a message held for hours, then nacked with a
// long delay) is shortened to fit, with a warning.
//
// # Delayed delivery
//
// On sqs:// a Message.DeliverAt in the future is sent as the message's
// DelaySeconds, rounded up to the whole second so that it is never
// delivered early (Capabilities.DelayedDelivery is relay.DelayNative,
// MaxDeliverDelay 15 minutes: SQS's limit; beyond it Publish fails with
// a *relay.LimitError). SQS holds the message: nothing of relay needs to
// run meanwhile. FIFO queues take no per-message delay: a delayed message
// to a ".fifo" queue fails with relay.ErrDelayUnsupported naming FIFO,
// and with fifo=true the publisher declares no delayed delivery. SNS has
// no delay: sns:// declares none and refuses delayed messages. goaws
// v0.5.4 honours DelaySeconds in SendMessage but ignores it in
// SendMessageBatch entries; batch_calls=false (one call per message)
// makes delays work there, at ten times the calls.
package sqs
