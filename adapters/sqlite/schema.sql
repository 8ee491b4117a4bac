-- relay's SQLite schema. The adapter runs this file itself (embedded) when
-- a process first opens the database file; every statement is idempotent.
-- To create the tables ahead (for the transactional outbox in a database
-- that relay has not opened yet), run it: sqlite3 app.db < schema.sql.
-- Times are Unix microseconds (UTC). Rows are relay's: write them by hand
-- only as docs/sqlite.md describes (a message and its delivery rows in
-- one transaction).

-- One row per (topic, group). Publishing makes one delivery row per group
-- of the topic; a group receives what is published after its row exists.
CREATE TABLE IF NOT EXISTS relay_groups (
    topic      TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (topic, name)
) WITHOUT ROWID;

-- One row per published message, kept while some group still has a
-- delivery row for it. metadata is a JSON object of strings; ids are
-- never reused (AUTOINCREMENT), so a message's id is its lasting position.
-- deliver_at is Message.DeliverAt (0: none), the first visible_at of the
-- message's delivery rows.
CREATE TABLE IF NOT EXISTS relay_messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    topic      TEXT    NOT NULL,
    relay_id   TEXT    NOT NULL DEFAULT '',
    key        TEXT    NOT NULL DEFAULT '',
    metadata   TEXT    NOT NULL DEFAULT '{}',
    payload    BLOB    NOT NULL DEFAULT x'',
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    deliver_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS relay_messages_topic_id ON relay_messages (topic, id);

-- One row per (group, message) not yet acknowledged. A row is claimable
-- when visible_at <= now; a claim sets visible_at to now + lease, counts
-- attempts and names the lease holder (one subscription).
CREATE TABLE IF NOT EXISTS relay_deliveries (
    topic        TEXT    NOT NULL,
    group_name   TEXT    NOT NULL,
    message_id   INTEGER NOT NULL,
    visible_at   INTEGER NOT NULL DEFAULT 0,
    attempts     INTEGER NOT NULL DEFAULT 0,
    lease_holder TEXT,
    PRIMARY KEY (topic, group_name, message_id)
) WITHOUT ROWID;
-- Retention: is a message still needed by any group?
CREATE INDEX IF NOT EXISTS relay_deliveries_message_id ON relay_deliveries (message_id);
