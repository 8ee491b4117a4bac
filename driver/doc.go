// Package driver is the contract between relay and a broker adapter, and
// the shared data path that turns an adapter into a relay.Publisher and a
// relay.Subscriber. It is public so that adapters can live outside this
// module, as database/sql/driver lets database drivers do; the adapters of
// this module use nothing else. Applications never import it.
//
// # What an adapter writes
//
// Broker calls and codecs only:
//
//   - PublishDriver: SendBatch makes one attempt to send one batch and
//     returns once the broker accepted every message (or a
//     *relay.PublishError naming those it did not), marking with Retryable
//     the failures that may be sent again. Optional: AsyncSender (a client that pipelines natively: the
//     batch is handed over and a done func called with the outcome, which
//     PublishAsync uses), WholeSender (split a Publish call itself),
//     MessageValidator and TopicValidator (limits beyond the generic size
//     check), relay.HealthChecker, DueHolder (delayed delivery held by
//     the subscriptions, for a broker without scheduling; on both sides).
//     A driver with delayed delivery of its own reads Message.DeliverAt
//     (see Delay) and declares Capabilities().DelayedDelivery; the shared
//     publisher refuses what that does not cover (CheckDelay).
//   - SubscribeDriver: Subscribe starts one Receiver per (topic, group)
//     subscription. Optional: ProvisionDriver, LagDriver (count what the
//     group took and has not acknowledged too: the bridge's caught-up
//     state reads lag 0 as "everything confirmed"), HistoryDriver (read
//     a topic without consuming, for relay verify), RemoveTopicDriver,
//     relay.HealthChecker, DueHolder. A Received carries the message's
//     Position where the broker has lasting coordinates.
//   - Receiver: Receive returns between 1 and max messages (blocking until
//     it has some or ctx is done; or none and no error after a broker call
//     that answered with nothing, such as an empty long poll, so that the
//     call counts as a success for Health), Settle applies a batch of acks and
//     nacks, Release hands unsettled messages back to the group at once,
//     Close(ctx) ends the broker side within ctx. Optional: Extender (lease
//     extension for brokers that lease messages), ReceiveLimiter
//     (the most messages per Receive call and how many calls may run at
//     once; the shared layer runs that many within the window),
//     WindowLimiter (a smaller window where the broker bounds the whole
//     group's unsettled messages), Committer (a position committed apart
//     from the acks, as Kafka's offsets: the shared layer commits after
//     each settlement batch that held an ack or every
//     Options.CommitInterval, and retries a failed commit until it lands).
//   - An Opener registered with relay.Register for the URL scheme, which
//     should also implement relay.URLChecker: Opener does both around the
//     adapter's URL parser (written with urlopt and tlsconf) and its
//     constructors, and declares the adapter's relay.URLDefaults.
//
// Where a broker leaves bookkeeping to the client, the adapter uses this
// package's helpers rather than keeping its own: AttemptMemo for the
// attempts of redeliveries the broker does not count, Mover for the
// background loop of an emulated delayed delivery, Lookups for what a
// broker call found per topic (a queue's URL, a stream, a topic known to
// exist), ReadAhead for what a client brought before Receive asked (a
// fetch shared by several subscriptions, messages the broker pushes),
// bounded by bytes and count, and backoff.Retry for
// the broker calls outside Receive, Settle and SendBatch (reconnecting,
// declaring topology).
//
// An adapter keeps no buffers, windows, credit counters, settlement
// lingers or retry loops of its own: a Receive call is one broker call
// (or a poll that repeats while the broker returns nothing), a Settle
// call splits its batch into the broker's calls and returns an error when
// one failed, and the shared layer retries it with its one policy. So
// does a SendBatch or SendAll call: one attempt, whose errors the driver
// classifies (Retryable: may be sent again; anything else: failed for
// good). What an attempt learns about the broker stays the driver's: it
// may forget a cached stream or queue that turned out missing, look it
// up again within the attempt, and record the error for its Health.
//
// # Retries of publish calls
//
// A whole-call error marked Retryable means that none of the batch was
// accepted for sure and that all of it may be sent again; a
// *relay.PublishError whose entries' Err are marked Retryable means that
// those messages may be sent again. SendError builds either shape from a
// send's failures by one rule. The Publisher sends exactly those
// messages again (only them, in their order), with the backoff the
// receive side uses (from 100ms doubling to 5s, jittered), until they are
// accepted or the Publish ctx ends; a batch is settled that way before
// the next of the same Publish call is sent. A message still to be sent
// when ctx ends fails with "relay/<Backend>: <ctx error> (last error:
// <the last marked error>)", wrapping both; unmarked failures are
// reported at once. Publish's error keeps its shape: the plain error when
// its only batch, or its first, failed as a whole (nothing was accepted,
// the rest is not sent), otherwise a *relay.PublishError naming exactly
// the messages that failed. The
// PublishAsync calls that run on the Publisher's goroutine retry the same
// way; those handed to an AsyncSender are not sent again by the
// Publisher (a pipelining client such as franz-go retries on its own).
//
// # What this package does for it
//
// NewPublisher and NewSubscriber own everything else (the Subscriber also
// offers the batch path, BatchSubscriber, on which the router's batch
// handlers and the bridge take each received batch whole): argument and limit
// checks (including assigning a UUIDv7 to a message without an ID), the
// in-flight window, read-ahead, settlement batching and linger, emulated
// NackAfter delays where the driver has no native delay, lease extension,
// retry with backoff of failed receive, settle and (Retryable) publish
// calls, Health, ctx and
// Close semantics with one teardown deadline (Options.CloseTimeout), and
// the release of unsettled messages when a subscription ends. The
// conformance suite driver/drivertest checks the result against the
// contract of package relay; every adapter should run it.
//
// # Calling conventions
//
//   - SendBatch is called concurrently; everything else of a Receiver is
//     called from the subscription's goroutines: Receive from one (or
//     from as many as ReceiveLimits declares, concurrently), Settle
//     from one, Extend from one, and Release then Close last, after the
//     others returned.
//   - A batch passed to SendBatch is at most Capabilities().MaxBatch long
//     (when non-zero) and passed every limit check. Its messages are read
//     only, by SendBatch, SendBatchAsync, ValidateMessage and the
//     encoders, also after they return: callers share Metadata maps and
//     payloads between messages and concurrent calls (the bridge's copies
//     do), so a driver never writes them; drivertest's ConcurrentPublish
//     publishes messages that share one map.
//   - Receive's errors other than ctx's are retried with backoff (the
//     receiver reconnects as needed); an error wrapping relay.ErrClosed ends
//     the subscription. A delivery that cannot be decoded is returned as a
//     message carrying the raw bytes, never as an error, so poison input
//     never ends a subscription.
//   - Settle.Delay is non-zero only when the driver declares
//     Capabilities().NativeDelay (and the delay is within MaxDelay).
//   - The batch slice passed to Settle is reused once Settle returns: a
//     Receiver keeps no reference to it (copy what it must keep). The
//     other way round, the slice Receive returns is read before the next
//     Receive call and not kept, so a Receiver may reuse it.
//   - No method may block past its ctx.
package driver
