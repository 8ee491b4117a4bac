// Package middleware holds the standard router middleware: Retry,
// PoisonQueue, Dedup (with a memory Store; a Redis Store is in
// middleware/dedupredis), Recoverer, Timeout and CorrelationID. Prometheus
// metrics and OpenTelemetry tracing are in middleware/metrics and
// middleware/tracing, so that programs that do not use them do not link
// them.
//
// Every middleware is a router.Middleware. Those that take a Config return
// (router.Middleware, error) and report every problem of the Config at
// once; the others are plain functions.
//
// # Order
//
// The first middleware given to router.Use is the outermost. The
// recommended order is:
//
//	r.Use(
//		m.Middleware,             // metrics: sees every outcome
//		tracing.Middleware(tcfg), // tracing: one span per handling
//		middleware.CorrelationID,
//		poison,                   // last resort: sees only what Retry gave up on
//		retry,                    // retries what is inside it
//		dedup,                    // each attempt reserves; a done duplicate is acked unrun
//		middleware.Timeout(10*time.Second), // per attempt
//		middleware.Recoverer,     // a panic becomes an error Retry and PoisonQueue see
//	)
//
// PoisonQueue must be outside Retry: Retry(PoisonQueue(h)) poisons on the
// first failure, because PoisonQueue turns the failure into success before
// Retry sees it (the trap Watermill users fall into). Dedup must be inside
// PoisonQueue: a poisoned message is then released, not recorded as done,
// so replaying it from the poison topic runs it again.
//
// A poison copy has an ID of its own, PoisonID(original ID, handler
// name, topic), and keeps the original ID in PoisonOriginalIDKey: the
// copies of one message that several handlers poison into one topic stay
// distinct (brokers such as NATS JetStream store one message per ID
// within a window), and a repeated poison of the same message by the same
// handler has the same ID, so it deduplicates.
//
// Middleware placed outside others learns what happened inside (retries,
// poisoning, duplicates) through the Observer in the context; the metrics
// and tracing middleware use it.
package middleware
