package router

import (
	"github.com/go-relay/relay"
)

// Output is a destination for the messages a handler returns.
type Output struct {
	// Publisher publishes to Topic. The router does not close it unless it
	// was handed to Router.Own; one publisher may serve many outputs and
	// handlers.
	Publisher relay.Publisher
	Topic     string
	// Match selects which returned messages go to this output; nil takes
	// all. A returned message that no output takes fails the input with
	// ErrNoOutput.
	Match func(*relay.Message) bool
}

// HandlerOption configures one handler in AddHandler.
type HandlerOption func(*handlerConfig)

type handlerConfig struct {
	outputs     []Output
	concurrency int
	queue       int
	middleware  []Middleware
	guarantee   relay.Guarantee
}

// WithOutput adds an output: every message the handler returns is published
// to topic with pub (in one Publish call per output, in the returned order)
// before the input is acked. Outputs are published in the order added.
func WithOutput(pub relay.Publisher, topic string) HandlerOption {
	return WithOutputs(Output{Publisher: pub, Topic: topic})
}

// WithOutputs adds outputs, for example with Match functions that route
// returned messages to different topics.
func WithOutputs(outs ...Output) HandlerOption {
	return func(c *handlerConfig) { c.outputs = append(c.outputs, outs...) }
}

// WithConcurrency lets up to n messages be handled at once (default 1).
// Messages are spread over n lanes: messages with the same non-empty Key go
// to the same lane and are handled one after another in delivery order;
// messages without a Key go to whichever lane is free. The subscriber's
// in-flight window must be at least n for n to be reached.
func WithConcurrency(n int) HandlerOption {
	return func(c *handlerConfig) { c.concurrency = n }
}

// WithQueueSize sets how many delivered messages may wait for each lane
// (default 8). A larger queue lets other keys proceed while one key is
// slow; every waiting message counts against the subscriber's in-flight
// window and is nacked, not handled, when the router shuts down.
func WithQueueSize(n int) HandlerOption {
	return func(c *handlerConfig) { c.queue = n }
}

// WithMiddleware adds handler-level middleware. It always runs inside the
// router-level middleware given to Use, whatever the order of the calls;
// among themselves the first is the outermost.
func WithMiddleware(mw ...Middleware) HandlerOption {
	return func(c *handlerConfig) { c.middleware = append(c.middleware, mw...) }
}

// WithGuarantee chooses the handler's delivery guarantee (default
// relay.AtLeastOnce, where the input is acked after the handler succeeded
// and its outputs were published, and nacked for redelivery otherwise).
//
// With relay.AtMostOnce the router acks the input before it calls the
// handler and never redelivers it: if the handler fails, panics or the
// process dies, the message is lost (logged at Warn, with its ID). The
// messages the handler returns are published once; a failed publish is
// logged and not retried. msg.Context() is already done when the handler
// runs (the message is settled), so use the handler's ctx. Middleware
// marked with Retrying (middleware.Retry) is refused by AddHandler and Use,
// and should anything else call the handler twice for one message, the
// second call fails with ErrRetriedAtMostOnce without running it. Ack does
// not wait for the broker (see relay.Message.Ack): a crash in the moment
// between the ack and the broker receiving it can still redeliver.
//
// relay.ExactlyOnce is accepted when the subscriber is a
// relay.ExactlyOnceSubscriber and every output's publisher is its paired
// publisher (ExactlyOnceWith reports true), such as the two halves of
// kafka.NewExactlyOnce or relay.OpenExactlyOnce on a kafka:// source and
// destination of one cluster. The handler then runs as at-least-once (the
// input is acked after its outputs were published, nacked on failure), and
// the pair's transaction makes the outputs and the ack take effect
// together: a failure, a nack or a crash aborts the transaction (no output
// becomes visible to read_committed consumers) and the input is delivered
// again. Only the outputs are covered: what the handler does elsewhere
// (a database write, a publish with another publisher) may happen more
// than once. Anything else is refused by AddHandler with a
// *GuaranteeError that says why; AtLeastOnce with middleware.Dedup gives
// an exactly-once effect on any backend.
func WithGuarantee(g relay.Guarantee) HandlerOption {
	return func(c *handlerConfig) { c.guarantee = g }
}
