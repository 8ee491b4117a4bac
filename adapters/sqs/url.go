package sqs

import (
	"context"
	"log/slog"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// URL schemes of this adapter.
const (
	SchemeSQS = "sqs"
	SchemeSNS = "sns"
)

func init() {
	newOpener(SchemeSQS).Register(SchemeSQS)
	newOpener(SchemeSNS).Register(SchemeSNS)
}

// newOpener returns the opener of sqs://?region=R&... or sns://?... (see
// docs/sqs.md).
func newOpener(scheme string) *driver.Opener[Config] {
	return &driver.Opener[Config]{
		Backend: "sqs",
		Parse:   parseURL,
		NewPublisher: func(ctx context.Context, c Config) (relay.Publisher, error) {
			return newPublisher(ctx, scheme, c, nil)
		},
		NewSubscriber: func(ctx context.Context, c Config) (relay.Subscriber, error) {
			return newSubscriber(ctx, scheme, c, nil)
		},
		Defaults: relay.URLDefaults{SourceWindow: driver.DefaultSourceWindow, EitherSide: true, NoGroup: scheme == SchemeSQS},
	}
}

// NewSQSPublisher returns a publisher to SQS queues: the topic is the
// queue name. ctx bounds loading the AWS configuration only. The
// publisher is safe for concurrent use and implements
// relay.CapabilityReporter and relay.HealthChecker.
func NewSQSPublisher(ctx context.Context, cfg Config, opts ...Option) (relay.Publisher, error) {
	return newPublisher(ctx, SchemeSQS, cfg, opts)
}

// NewSNSPublisher returns a publisher to SNS topics. See NewSQSPublisher.
func NewSNSPublisher(ctx context.Context, cfg Config, opts ...Option) (relay.Publisher, error) {
	return newPublisher(ctx, SchemeSNS, cfg, opts)
}

// NewSQSSubscriber returns a subscriber of SQS queues: the topic is the
// queue name and the queue is the group of competing consumers
// (cfg.Group must be empty). It implements relay.Provisioner,
// relay.CapabilityReporter and relay.HealthChecker.
func NewSQSSubscriber(ctx context.Context, cfg Config, opts ...Option) (relay.Subscriber, error) {
	return newSubscriber(ctx, SchemeSQS, cfg, opts)
}

// NewSNSSubscriber returns a subscriber of SNS topics for cfg.Group: the
// group's queue "<topic>-<group>" is created and subscribed to the topic
// with raw message delivery. See NewSQSSubscriber.
func NewSNSSubscriber(ctx context.Context, cfg Config, opts ...Option) (relay.Subscriber, error) {
	return newSubscriber(ctx, SchemeSNS, cfg, opts)
}

func applyOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	return o
}

// endpoint is the setup a publisher and a subscriber share: the validated
// configuration with its defaults, the service clients, the topology
// cache, the capability row and the logger.
type endpoint struct {
	scheme string
	cfg    Config
	c      *clients
	topo   *topology
	caps   relay.Capabilities
	log    *slog.Logger
}

func newEndpoint(ctx context.Context, scheme string, cfg Config, opts []Option, subscriber bool) (endpoint, error) {
	if err := cfg.Validate(scheme, subscriber); err != nil {
		return endpoint{}, err
	}
	cfg = cfg.withDefaults()
	o := applyOptions(opts)
	c, err := newClients(ctx, cfg, o, scheme == SchemeSNS)
	if err != nil {
		return endpoint{}, err
	}
	log := o.logger.With("backend", scheme)
	return endpoint{
		scheme: scheme,
		cfg:    cfg,
		c:      c,
		topo:   &topology{c: c, cfg: cfg, log: log},
		caps:   capabilities(scheme, cfg),
		log:    log,
	}, nil
}

func newPublisher(ctx context.Context, scheme string, cfg Config, opts []Option) (relay.Publisher, error) {
	e, err := newEndpoint(ctx, scheme, cfg, opts, false)
	if err != nil {
		return nil, err
	}
	api := sqsPublishAPI(e.c, e.topo)
	if scheme == SchemeSNS {
		api = snsPublishAPI(e.c, e.topo)
	}
	d := &pubDriver{endpoint: e, api: api}
	d.noBatch.Store(cfg.NoBatchCalls)
	return driver.NewPublisher(d, 0), nil
}

func newSubscriber(ctx context.Context, scheme string, cfg Config, opts []Option) (relay.Subscriber, error) {
	e, err := newEndpoint(ctx, scheme, cfg, opts, true)
	if err != nil {
		return nil, err
	}
	d := &subDriver{endpoint: e}
	extend := e.cfg.ExtendEvery
	if extend < 0 {
		extend = 0
	}
	// The acks' linger is the shared layer's settlement linger (ack_linger=0:
	// its shortest).
	return driver.NewSubscriber(d, driver.Options{InFlight: e.cfg.InFlight, InFlightBytes: e.cfg.InFlightBytes, ExtendEvery: extend,
		SettleLinger: max(e.cfg.AckLinger, 0), Logger: e.log, Group: e.cfg.Group}), nil
}

// capabilities is the capability row of scheme under cfg.
func capabilities(scheme string, cfg Config) relay.Capabilities {
	c := relay.Capabilities{
		Backend:           scheme,
		Durable:           true,
		CrossProcess:      true,
		Ordering:          relay.OrderNone,
		NativeDelay:       true,
		MaxDelay:          MaxNackDelay,
		NativeDeadLetter:  true,
		AttemptFromBroker: true,
		MaxMessageBytes:   cfg.MaxBytes,
		MaxBatch:          MaxBatch,
		// SQS takes up to 1 MiB, SNS 256 KiB (see Validate).
		MaxMessageBytesSetBy: "max_bytes= (at most 1 MiB on sqs://)",
	}
	if scheme == SchemeSNS {
		c.MaxMessageBytesSetBy = "max_bytes= (at most 256 KiB, SNS's limit)"
	}
	if cfg.FIFO {
		c.Ordering = relay.OrderPerKey
	}
	// DelaySeconds is per message on standard queues only; SNS has no
	// delay at all. (A FIFO queue among standard ones, without fifo=true,
	// is refused per message by ValidateMessage.)
	if scheme == SchemeSQS && !cfg.FIFO {
		c.DelayedDelivery = relay.DelayNative
		c.MaxDeliverDelay = MaxDeliverDelay
	}
	if scheme == SchemeSNS {
		c.PublishToGroup = true // straight to the group's queue: SendBatchToGroup
		c.RetainedBeforeGroup = "dropped unless the group was provisioned (Provision or an earlier Subscribe): SNS delivers only to existing subscriptions"
	} else {
		c.RetainedBeforeGroup = "kept: the queue is the group, and the publisher creates it (create_queues=true)"
	}
	return c
}
