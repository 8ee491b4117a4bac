-- relay's PostgreSQL schema. The adapter runs this file itself (embedded)
-- from Provision, Subscribe and publisher open, inside a transaction that
-- holds an advisory lock, so concurrent starts do not race; every statement
-- is idempotent. To create the tables ahead (e.g. from a migration tool),
-- replace __SCHEMA__ with the schema name (default relay) and run it.
-- Tables are managed by relay: do not change their rows by hand except
-- through PublishTx/PublishSQLTx (the transactional outbox).

CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

-- One row per (topic, group). Publishing makes one delivery row per group
-- of the topic; a group receives what is published after its row exists.
CREATE TABLE IF NOT EXISTS __SCHEMA__.groups (
    topic      text        NOT NULL,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, name)
);

-- One row per published message, kept while some group still has a
-- delivery row for it. md_keys and md_values are the metadata, pairwise.
CREATE TABLE IF NOT EXISTS __SCHEMA__.messages (
    id         bigserial   PRIMARY KEY,
    topic      text        NOT NULL,
    relay_id   text        NOT NULL,
    key        text        NOT NULL DEFAULT '',
    md_keys    text[]      NOT NULL DEFAULT '{}',
    md_values  text[]      NOT NULL DEFAULT '{}',
    payload    bytea       NOT NULL DEFAULT '\x',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS messages_topic_id ON __SCHEMA__.messages (topic, id);

-- One row per (group, message) not yet acknowledged. A row is claimable
-- when visible_at <= now(); a claim sets visible_at to now() + lease,
-- counts attempts and names the lease holder (one subscription).
CREATE TABLE IF NOT EXISTS __SCHEMA__.deliveries (
    topic        text        NOT NULL,
    group_name   text        NOT NULL,
    message_id   bigint      NOT NULL,
    visible_at   timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    lease_holder text,
    PRIMARY KEY (topic, group_name, message_id)
);
-- Retention: is a message still needed by any group?
CREATE INDEX IF NOT EXISTS deliveries_message_id ON __SCHEMA__.deliveries (message_id);
