// Package driver turns a small, batch-oriented broker driver into the public
// relay.Publisher and relay.Subscriber, so that the plumbing every adapter
// needs is written and tested once: limit checks, batching, close semantics,
// the in-flight window, settlement batching, emulated Nack delay, lease
// extension, release of unsettled messages when a subscription ends, and
// retry with backoff of transient broker errors.
//
// An adapter implements PublishDriver, SubscribeDriver and Receiver; it is
// then only the broker-specific part.
package driver
