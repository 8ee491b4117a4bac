package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/middleware/dedupredis"
	"github.com/go-relay/relay/router"
)

// The handler chain of a route, outermost first:
//
//	[tracing → OTel metrics] → observe → PoisonQueue (if poison) → Retry → Dedup (if dedup) → forward
//
// PoisonQueue sits outside Retry, so it sees only what Retry gave up on;
// Dedup inside Retry, so each attempt reserves the message ID and a failed
// attempt releases it. The forwarder publishes and returns no outputs, so
// every middleware sees the destination's answer, and the router acks the
// source only after the chain returned success. An at-most-once route
// (Route.Guarantee) has neither PoisonQueue nor Retry, and its router acks
// the source before the chain runs. Tracing and the OpenTelemetry metrics
// (Options.TracerProvider, MeterProvider) are outermost, so that the
// process span sees the retries, poisoning and duplicates inside. A
// pipelined route (pipeline.go) starts those two per message of a batch
// itself and runs the rest of the chain, under the message's span, for
// the copies it forwards alone.

// chain builds the route's middleware around the forwarder for one session.
func (r *route) chain(poisonPub relay.Publisher) ([]router.Middleware, error) {
	mws := append(r.tel.middleware(), r.observe)
	if p := r.cfg.Poison; p != nil {
		after := p.AfterDeliveries
		if after == 0 {
			after = math.MaxInt32 // only permanent rejections
		}
		mw, err := middleware.PoisonQueue(middleware.PoisonConfig{
			Publisher:       poisonPub,
			Topic:           p.Topic,
			AfterDeliveries: after,
			// A message a fenced session could not forward is given back
			// for the next session, never poisoned.
			ShouldPoison: func(err error) bool { return !errors.Is(err, relay.ErrFenced) },
		})
		if err != nil {
			return nil, err
		}
		mws = append(mws, mw)
	}
	if rt := r.cfg.Retry; rt != nil { // nil on an at-most-once route
		mw, err := middleware.Retry(middleware.RetryConfig{
			MaxAttempts:     rt.MaxAttempts,
			InitialInterval: rt.InitialInterval,
			MaxInterval:     rt.MaxInterval,
			MaxElapsed:      rt.MaxElapsed,
			// A fenced session cannot publish again: give the message
			// back (the route opens a new session) instead of retrying.
			Retryable: func(err error) bool { return !errors.Is(err, relay.ErrFenced) },
		})
		if err != nil {
			return nil, err
		}
		mws = append(mws, mw)
	}
	if d := r.cfg.Dedup; d != nil {
		mw, err := middleware.Dedup(middleware.DedupConfig{
			Store:  r.dedupStore,
			Lease:  r.dedupLease(),
			TTL:    d.TTL,
			Logger: r.log,
		})
		if err != nil {
			return nil, err
		}
		mws = append(mws, mw)
	}
	return mws, nil
}

// newDedupStore returns the store named by cfg ("memory" or a redis URL)
// and what to close when the bridge stops.
func newDedupStore(d *Dedup) (middleware.Store, io.Closer, error) {
	if d.Store == "memory" || d.Store == "" {
		return middleware.NewMemoryStore(middleware.MemoryStoreConfig{}), nil, nil
	}
	opts, err := redis.ParseURL(d.Store)
	if err != nil {
		return nil, nil, fmt.Errorf("dedup store %s: %w", relay.Redact(d.Store), err)
	}
	client := redis.NewClient(opts)
	st, err := dedupredis.New(client, dedupredis.Config{})
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return st, client, nil
}

// rejected reports whether the destination refused a message for a reason
// that retrying cannot fix.
func rejected(err error) bool {
	return errors.Is(err, relay.ErrLimit) || errors.Is(err, relay.ErrInvalidTopic) || errors.Is(err, relay.ErrNotSupported)
}

// observe keeps the in-flight gauges, records the last error and counts what happened to each
// delivery, including what the middleware inside did.
func (r *route) observe(next router.Handler) router.Handler {
	return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		size := float64(len(m.Payload))
		r.m.inFlight.Inc()
		r.m.inFlightBytes.Add(size)
		defer func() {
			r.m.inFlight.Dec()
			r.m.inFlightBytes.Sub(size)
		}()
		outs, err := next(middleware.WithObserver(ctx, routeObserver{r}), m)
		if err != nil {
			if !errors.Is(err, relay.ErrFenced) { // given back to the next session, not failed
				r.m.failed.Inc()
			}
			r.fail(err)
		}
		return outs, err
	}
}

type routeObserver struct{ r *route }

func (o routeObserver) Retried(_ context.Context, m *relay.Message, ev middleware.RetryEvent) {
	o.r.m.retries.Inc()
	o.r.fail(ev.Err)
	o.r.log.Debug("retrying publish", "id", m.ID, "attempt", ev.Attempt, "delay", ev.Delay, "err", ev.Err)
}

func (o routeObserver) Poisoned(_ context.Context, m *relay.Message, err error) {
	o.r.m.poisoned.Inc()
	o.r.fail(err)
	o.r.log.Warn("message moved to the poison topic", "id", m.ID, "poison_topic", o.r.cfg.Poison.Topic, "err", err)
}

func (o routeObserver) Deduplicated(_ context.Context, m *relay.Message, _ string) {
	o.r.m.duplicates.Inc()
	o.r.log.Debug("not forwarding a duplicate", "id", m.ID)
}
