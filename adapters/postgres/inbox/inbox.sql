-- relay's inbox table (package github.com/go-relay/relay/adapters/postgres/inbox).
-- Inbox.EnsureSchema runs this file itself (embedded) under an advisory
-- lock; every statement is idempotent. To create the table ahead (e.g.
-- from a migration tool), replace __SCHEMA__ with the schema name (default
-- relay) and run it.

CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

-- One row per (consumer, message ID) whose handler transaction committed.
-- The primary key is what makes a second delivery of the same ID a no-op:
-- its INSERT ... ON CONFLICT DO NOTHING waits for a concurrent holder of
-- the key to commit (then inserts nothing) or roll back (then inserts).
CREATE TABLE IF NOT EXISTS __SCHEMA__.inbox (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
-- Retention: Prune deletes the oldest rows in bounded batches.
CREATE INDEX IF NOT EXISTS inbox_processed_at ON __SCHEMA__.inbox (processed_at);
