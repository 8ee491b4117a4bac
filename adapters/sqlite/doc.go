// Package sqlite is the SQLite backend (sqlite://PATH): a durable queue in
// one database file, with no server, on modernc.org/sqlite (pure Go, no
// cgo). A single binary starts on a file and moves to a broker later
// through the bridge, with the same code. docs/sqlite.md is the reference.
//
// sqlite:///var/lib/app/relay.db names an absolute path, sqlite://./relay.db
// and sqlite://data/relay.db paths relative to the working directory; the
// file and relay's tables (SchemaSQL) are created when missing; :memory: is
// refused (it lives in one connection). The database runs in WAL mode with
// busy_timeout= (default 5s) and synchronous= (full, default, or normal).
// In one process, every publisher and subscriber of a file shares one
// handle: one writing connection, for which writes queue in Go, and a pool
// of reading ones. Processes of one machine may share the file.
//
// The tables mirror those of adapters/postgres: relay_groups, relay_messages
// (metadata as a JSON object) and relay_deliveries, one row per group and
// message not yet acknowledged. A publish batch is one IMMEDIATE
// transaction storing each message for every group the topic has (none:
// nothing is kept). A claim is one IMMEDIATE transaction that deletes the
// rows of the acks collected since and leases up to the free window of the
// group's rows whose visible_at has passed, in message order; SQLite admits
// one writer at a time, so two subscriptions never lease one row. NackAfter
// and Message.DeliverAt set visible_at (native, unbounded, across
// restarts); Attempt is the attempts column. Publishes, nacks and releases
// wake the process's subscriptions at once; rows other processes write are
// found within poll= (default 100ms). A message row goes with the last
// group's ack, or at max_age=. PublishTx is the transactional outbox on the
// caller's *sql.Tx.
package sqlite
