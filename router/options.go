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
