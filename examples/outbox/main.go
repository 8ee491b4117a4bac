// Command outbox shows the transactional outbox on PostgreSQL.
//
// An order service saves each order and its "order placed" event in one
// database transaction (postgres.PublishTx), so the event exists if and
// only if the order does: no event for an order that was rolled back, no
// order without its event, even if the process dies between the two. A
// forwarder subscribes to the events with a postgres:// subscriber and
// publishes each to a broker (Redis by default, any relay URL), acking
// the database copy only once the broker has it. A consumer on the broker
// prints the events.
//
// One order is a duplicate: its insert fails, the transaction rolls back,
// and its event is never forwarded.
//
//	go run ./examples/outbox
//	go run ./examples/outbox -db postgres://app@db:5432/app -broker amqp://guest:guest@127.0.0.1:5672/
//	BROKER=nats://127.0.0.1:4222 go run ./examples/outbox
//
// -broker wins over $BROKER; the default is redis://127.0.0.1:6379/0 (and
// -db over $DB, default postgres://postgres@127.0.0.1:5432/test).
//
// It exits 0 once every saved order's event reached the consumer, 1 if
// one is missing when -timeout runs out. The forwarder is what `relay
// bridge` does with a route from postgres:// to the broker; it is written
// out here to show the pieces.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/postgres" // registers postgres://; PublishTx

	_ "github.com/go-relay/relay/adapters/amqp"        // registers amqp://, amqps://
	_ "github.com/go-relay/relay/adapters/kafka"       // registers kafka://
	_ "github.com/go-relay/relay/adapters/memory"      // registers mem://
	_ "github.com/go-relay/relay/adapters/redisstream" // registers redis://, rediss://
)

// Order is the business row and the event's payload.
type Order struct {
	ID    string `json:"id"`
	Total string `json:"total"`
}

var orders = []Order{{"A-1001", "59.90"}, {"A-1002", "12.50"}, {"A-1001", "59.90"}, {"A-1003", "230.00"}}

func main() {
	db := dbFlag(flag.CommandLine)
	broker := brokerFlag(flag.CommandLine)
	schema := flag.String("schema", "relay_outbox_example", "schema of the orders table and relay's tables")
	timeout := flag.Duration("timeout", 30*time.Second, "give up if not every event arrived by then")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	id := relay.NewID()
	topic := "orders-placed-" + id[len(id)-8:] // fresh per run: a broker keeps earlier runs' events
	if err := run(ctx, os.Stdout, *db, *broker, *schema, topic); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

// dbFlag defines -db on fs.
func dbFlag(fs *flag.FlagSet) *string {
	return envFlag(fs, "db", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL (orders and the outbox)")
}

// brokerFlag defines -broker on fs.
func brokerFlag(fs *flag.FlagSet) *string {
	return envFlag(fs, "broker", "redis://127.0.0.1:6379/0", "broker URL the events are forwarded to")
}

// envFlag defines the string flag -name on fs, whose default is $NAME, else def.
func envFlag(fs *flag.FlagSet, name, def, usage string) *string {
	v := os.Getenv(strings.ToUpper(name))
	if v == "" {
		v = def
	}
	return fs.String(name, v, fmt.Sprintf("%s (default $%s, else %s)", usage, strings.ToUpper(name), def))
}

// withParams adds query parameters to a URL.
func withParams(raw string, kv ...string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// lockedWriter lets the forwarder and the consumer print at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func run(ctx context.Context, w io.Writer, dbURL, brokerURL, schema, topic string) error {
	out := &lockedWriter{w: w}
	fmt.Fprintf(out, "outbox: orders in %s, events forwarded to %s\n\n", relay.Redact(dbURL), relay.Redact(brokerURL))

	// The forwarder's group must exist before the first order is saved:
	// a postgres:// topic keeps messages only for groups that exist.
	// Opening the subscriber also creates relay's tables.
	sourceURL, err := withParams(dbURL, "schema", schema, "group", "forwarder")
	if err != nil {
		return err
	}
	source, err := relay.OpenSubscriber(ctx, sourceURL)
	if err != nil {
		return err
	}
	defer source.Close()
	if err := source.(relay.Provisioner).Provision(ctx, topic); err != nil {
		return err
	}

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	ordersTable := pgx.Identifier{schema, "orders"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+ordersTable+" (id text PRIMARY KEY, total numeric NOT NULL)"); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "TRUNCATE "+ordersTable); err != nil {
		return err
	}

	// The broker side: a publisher for the forwarder, a consumer that prints.
	sink, err := relay.OpenPublisher(ctx, brokerURL)
	if err != nil {
		return err
	}
	defer sink.Close()
	consumerURL, err := withParams(brokerURL, "group", "printer")
	if err != nil {
		return err
	}
	consumer, err := relay.OpenSubscriber(ctx, consumerURL)
	if err != nil {
		return err
	}
	defer consumer.Close()
	if p, ok := consumer.(relay.Provisioner); ok {
		if err := p.Provision(ctx, topic); err != nil {
			return err
		}
	}

	// Order service: the order row and its event, one transaction each.
	outbox := postgres.Outbox{Schema: schema}
	saved := map[string]bool{}
	for _, o := range orders {
		payload, _ := json.Marshal(o)
		ev := relay.NewMessage(payload)
		ev.Key = o.ID
		ev.Metadata = relay.Metadata{"type": "order.placed"}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+ordersTable+" (id, total) VALUES ($1, $2)", o.ID, o.Total); err != nil {
				return err
			}
			return outbox.PublishTx(ctx, tx, topic, ev)
		})
		if err != nil {
			fmt.Fprintf(out, "order service: order %s rejected, transaction rolled back, no event: %v\n", o.ID, err)
			continue
		}
		saved[o.ID] = true
		fmt.Fprintf(out, "order service: saved order %s and its event %s in one transaction\n", o.ID, ev.ID)
	}

	// Forwarder: database → broker; the database copy is acked only after
	// the broker confirmed its own.
	fctx, stopForwarder := context.WithCancel(ctx)
	defer stopForwarder()
	events, err := source.Subscribe(fctx, topic)
	if err != nil {
		return err
	}
	forwarded := make(chan error, 1)
	go func() {
		for m := range events {
			fwd := &relay.Message{ID: m.ID, Key: m.Key, Metadata: m.Metadata, Payload: m.Payload}
			if err := sink.Publish(fctx, topic, fwd); err != nil {
				_ = m.Nack()
				continue
			}
			_ = m.Ack()
			fmt.Fprintf(out, "forwarder: postgres → %s: event of order %s\n", relay.Redact(brokerURL), m.Key)
		}
		forwarded <- nil
	}()

	// Consumer: print every event until each saved order's arrived.
	printed, err := consumer.Subscribe(ctx, topic)
	if err != nil {
		return err
	}
	missing := len(saved)
	for missing > 0 {
		select {
		case m, ok := <-printed:
			if !ok {
				return errors.New("consumer subscription ended")
			}
			var o Order
			if err := json.Unmarshal(m.Payload, &o); err != nil {
				_ = m.Ack()
				continue
			}
			_ = m.Ack()
			fmt.Fprintf(out, "consumer: order placed: %s, total %s (event %s, %s)\n", o.ID, o.Total, m.ID, m.Metadata["type"])
			if saved[o.ID] {
				delete(saved, o.ID)
				missing--
			}
		case <-ctx.Done():
			return fmt.Errorf("%d event(s) missing: %w", missing, ctx.Err())
		}
	}
	stopForwarder()
	<-forwarded
	fmt.Fprintln(out, "\nevery saved order's event arrived; the rolled-back order's never existed")
	return nil
}
