// Package inbox is the transactional inbox for PostgreSQL: a router
// handler whose database writes happen exactly once per (consumer,
// message ID), whatever backend delivers the messages (mem://, redis://,
// kafka://, postgres://, ...).
//
//	pool, _ := pgxpool.New(ctx, "postgres://app@db:5432/app")
//	ib, _ := inbox.New(pool)
//	_ = ib.EnsureSchema(ctx) // or run inbox.sql in a migration
//	_ = r.AddHandler("bill", sub, "orders", ib.Handler("bill",
//		func(ctx context.Context, tx pgx.Tx, m *relay.Message) ([]*relay.Message, error) {
//			_, err := tx.Exec(ctx, `INSERT INTO invoices ...`, ...)
//			if err != nil {
//				return nil, err
//			}
//			// follow-up events through the outbox: same transaction
//			return nil, postgres.PublishTx(ctx, tx, "invoices", relay.NewMessage(event))
//		}))
//
// Each message runs in one transaction that first inserts (consumer,
// m.ID) into schema.inbox (ON CONFLICT DO NOTHING) and then runs the
// handler's writes; both commit together, and only then does the router
// ack. A redelivered message whose row exists is acked without calling the
// handler. See Inbox.Handler for the exact guarantee: the database effect
// is exactly once, the ack at least once, and messages the handler returns
// to the router are not covered (use the outbox, as above).
//
// The package is separate from adapters/postgres because it is a router
// integration: the adapter stays a plain backend that does not import the
// router, and a service that uses the inbox with a Kafka or Redis source
// needs no postgres:// subscription.
//
// Retention: rows are kept until Prune deletes them; run it periodically
// (for example daily, with an age of a week) in bounded batches.
package inbox
