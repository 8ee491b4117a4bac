package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres/inbox"
	"github.com/go-relay/relay/router"
)

// BenchmarkGuarantees handles b.N messages of a mem:// topic through a
// router handler (concurrency 8) that writes one effects row to
// PostgreSQL, three ways: through the inbox (the row and the inbox record
// in one transaction), a plain INSERT at-least-once, and the same INSERT
// at-most-once (router.WithGuarantee). The three run in interleaved
// rounds, so that the machine's load falls on each alike, and the
// benchmark reports each rate and its ratio to the plain at-least-once
// one. The clock runs from the first handler call to the end of the
// last; publishing the backlog is not counted.
//
//	go test -run '^$' -bench Guarantees -benchtime 2000x ./adapters/postgres/inbox/
func BenchmarkGuarantees(b *testing.B) {
	pool := rawPool(b)
	ib := newInbox(b, pool)
	const rounds = 3
	var took [3]time.Duration // inbox, at-least-once, at-most-once
	for range rounds {
		took[0] += handleOnce(b, pool, ib, true, relay.AtLeastOnce)
		took[1] += handleOnce(b, pool, ib, false, relay.AtLeastOnce)
		took[2] += handleOnce(b, pool, ib, false, relay.AtMostOnce)
	}
	rate := func(d time.Duration) float64 { return float64(rounds*b.N) / d.Seconds() }
	ibRate, aloRate, amoRate := rate(took[0]), rate(took[1]), rate(took[2])
	b.ReportMetric(ibRate, "inbox-msg/s")
	b.ReportMetric(aloRate, "alo-msg/s")
	b.ReportMetric(amoRate, "amo-msg/s")
	b.ReportMetric(ibRate/aloRate, "inbox/alo")
	b.ReportMetric(amoRate/aloRate, "amo/alo")
	b.ReportMetric(0, "ns/op")
}

// handleOnce fills a new mem:// topic with b.N messages, runs a router
// with the handler variant until every message was handled, checks that
// each wrote its row, and returns the time from the first call to the end
// of the last.
func handleOnce(b *testing.B, pool *pgxpool.Pool, ib *inbox.Inbox, useInbox bool, g relay.Guarantee) time.Duration {
	ctx := context.Background()
	base, topic, consumer := "mem://"+unique("bench"), unique("orders"), unique("c")
	pub, err := relay.OpenPublisher(ctx, base)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	sub, err := relay.OpenSubscriber(ctx, base+"?group=g&inflight=64")
	if err != nil {
		b.Fatal(err)
	}
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(ctx, topic); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i += 500 {
		batch := make([]*relay.Message, 0, 500)
		for range min(500, b.N-i) {
			batch = append(batch, relay.NewMessage([]byte("order")))
		}
		if err := pub.Publish(ctx, topic, batch...); err != nil {
			b.Fatal(err)
		}
	}

	insert := "INSERT INTO " + table("effects") + " (consumer, message_id, payload) VALUES ($1, $2, $3)"
	var h router.Handler
	if useInbox {
		h = ib.Handler(consumer, func(ctx context.Context, tx pgx.Tx, m *relay.Message) ([]*relay.Message, error) {
			_, err := tx.Exec(ctx, insert, consumer, m.ID, m.Payload)
			return nil, err
		})
	} else {
		h = func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			_, err := pool.Exec(ctx, insert, consumer, m.ID, m.Payload)
			return nil, err
		}
	}
	var start atomic.Int64 // unix nanoseconds of the first call
	var handled atomic.Int64
	all := make(chan time.Time, 1)
	clock := func(next router.Handler) router.Handler {
		return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			start.CompareAndSwap(0, time.Now().UnixNano())
			out, err := next(ctx, m)
			if err == nil && handled.Add(1) == int64(b.N) {
				all <- time.Now()
			}
			return out, err
		}
	}
	r, err := router.New(router.Config{})
	if err != nil {
		b.Fatal(err)
	}
	r.Own(sub)
	if err := r.AddHandler("bench", sub, topic, h, router.WithGuarantee(g), router.WithConcurrency(8),
		router.WithMiddleware(clock)); err != nil {
		b.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	var end time.Time
	select {
	case end = <-all:
	case err := <-done:
		b.Fatalf("router stopped before handling %d messages: %v", b.N, err)
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d messages handled after 5 minutes", handled.Load(), b.N)
	}
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if n := count(b, pool, "SELECT count(*) FROM "+table("effects")+" WHERE consumer = $1", consumer); n != b.N {
		b.Fatalf("%d effects rows for %d messages", n, b.N)
	}
	return end.Sub(time.Unix(0, start.Load()))
}
