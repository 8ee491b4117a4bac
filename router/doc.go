// Package router runs message handlers: subscribe → handle → publish the
// results → settle, with bounded concurrency, per-Key order and a graceful
// drain on shutdown.
//
//	r, _ := router.New(router.Config{CloseTimeout: 30 * time.Second})
//	_ = r.Use(middleware.CorrelationID, poison, retry, middleware.Recoverer)
//	_ = r.AddHandler("bill", sub, "orders", bill,
//		router.WithOutput(pub, "invoices"),
//		router.WithConcurrency(16))
//	r.Own(pub, sub) // closed once, when the router stops
//	err := r.Run(ctx) // blocks; cancel ctx or call r.Close to drain and stop
//
// # Settlement
//
// For every delivered message the router calls the handler (through the
// middleware). When it returns no error, the returned messages are published
// to the handler's outputs and only then is the input acked (at-least-once:
// a crash between the two publishes again). When it returns an error, or a
// publish fails, the input is nacked with Config.RedeliveryDelay, so a
// failing message is not redelivered in a hot loop. A panic that reaches
// the router is recovered and treated as an error (*PanicError).
//
// # Middleware order
//
// Middleware is func(Handler) Handler. The first one given is the
// outermost: Use(a, b) runs a, then b, then the handler, and the result
// travels back through b, then a. Router-level middleware (Use) always
// wraps handler-level middleware (WithMiddleware). The recommended order for
// the middleware package is:
//
//	metrics, tracing, CorrelationID, PoisonQueue, Retry, Dedup, Timeout, Recoverer
//
// PoisonQueue outside Retry: the message is poisoned only after Retry gave
// up. The other way round (Retry outside PoisonQueue) poisons on the first
// failure, because PoisonQueue turns the error into success before Retry
// sees it.
//
// # Concurrency and order
//
// WithConcurrency(n) gives a handler n lanes. Messages with the same Key go
// to the same lane and are handled one at a time, in delivery order;
// messages without a Key go to any free lane. With n = 1 (the default)
// messages are handled one at a time in delivery order. A message that fails
// is redelivered later, so a later message with the same Key may overtake
// it; put Retry in the chain to keep the lane on the failing message.
//
// # Batch handlers
//
// AddBatchHandler binds a BatchHandler, which gets several messages at once
// (for one bulk insert or API call): up to WithBatchSize messages, or fewer
// when WithBatchWait passes after the first, in delivery order, one batch at
// a time. It returns nil (all acked), a *BatchError naming the failed
// message IDs (those nacked with Config.RedeliveryDelay, the rest acked) or
// another error (all nacked). A batch never holds more messages than the
// subscription's in-flight window. Middleware is per message and does not
// wrap batch handlers; there is no poison queue for batches.
//
// # Shutdown
//
// See Router.Run. Handlers get a context owned by the router, not the
// message's context (which ends with the subscription): it stays live while
// the router drains, and Stopping(ctx) tells waiting code to give up.
package router
