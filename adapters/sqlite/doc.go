// Package sqlite is the SQLite backend (sqlite://PATH): a durable queue in
// one database file, with no server, on modernc.org/sqlite (pure Go, no
// cgo). It is relay's embedded default that outlives the process: a
// single binary starts on a file and moves to a broker later through the
// bridge, with the same code. docs/sqlite.md is the reference.
//
// # The file
//
// sqlite:///var/lib/app/relay.db names an absolute path, sqlite://./relay.db
// and sqlite://data/relay.db paths relative to the working directory; the
// file and relay's tables (SchemaSQL) are created when missing. The
// database runs in WAL mode with busy_timeout (busy_timeout=, default 5s)
// and synchronous=full (synchronous=normal: faster, and a commit can be
// lost to a power cut, not to a crash of the process). In one process,
// every publisher and subscriber of a file shares one handle: one writing
// connection, for which writes queue in Go, and a pool of reading ones.
// Several processes may share the file on one machine (not over a network
// file system); they take turns on SQLite's write lock. An in-memory
// database (:memory:) is refused: it lives in one connection.
//
// # Rows
//
// The tables mirror those of adapters/postgres: relay_groups (topic, name),
// relay_messages (id, topic, relay_id, key, metadata as a JSON object,
// payload, created_at) and relay_deliveries (topic, group_name,
// message_id, visible_at, attempts, lease_holder); times are Unix
// microseconds. Publishing inserts, in one IMMEDIATE transaction per batch
// (up to 1000 messages), each message row and a delivery row per group of
// the topic, nothing when the topic has no group: a group receives what
// is published after Provision or its first Subscribe created it.
// Another client may read the rows and insert messages the same way.
//
// # Consuming
//
// A claim is one IMMEDIATE transaction: it deletes the rows of the acks
// Settle kept, selects up to the free window of the group's rows whose
// visible_at has passed, in message order, and leases them (visible_at =
// now + lease=, default 30s; attempts + 1; lease_holder = the
// subscription). Since SQLite admits one writer at a time, two processes
// never lease one row. The shared layer extends held leases every lease/3;
// a crashed consumer's rows come back when its lease runs out. Attempt is
// the attempts column. Nack sets visible_at to now, NackAfter(d) to now+d
// (native, unbounded, across restarts); the release at the end of a
// subscription sets it to now. Ack deletes the delivery row, and the
// message row once no group has one. Message.DeliverAt becomes the
// delivery rows' visible_at (DelayNative).
//
// An idle subscription waits for a wake-up: publishes, nacks and releases
// of the same process wake its subscriptions of the topic at once; what
// other processes write is found by polling (poll=, default 100ms), and
// the group's next visible_at wakes it when due.
//
// # Retention
//
// A message is deleted when the last group acknowledges it. max_age=
// also deletes messages older than it, acknowledged or not, swept by the
// topic's running subscriptions. The file keeps its size (SQLite reuses
// freed pages); VACUUM it while nothing runs to shrink it.
//
// # Transactional outbox
//
// PublishTx writes messages inside the caller's *sql.Tx on the file: they
// are stored iff the transaction commits; a sqlite:// subscriber (a
// bridge route's source, for instance) finds them within its poll period.
package sqlite
