-- Mirrors SQLite's 0014_notifications.sql: the notification outbox, one
-- row an event and destination (dest: SHA-256 of the destination, never
-- the URL), claimed by a guarded update of state and lease.
CREATE TABLE notifications (
    id           TEXT NOT NULL,
    dest         TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    type         TEXT NOT NULL,
    body         BYTEA NOT NULL,
    state        TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      BIGINT NOT NULL,
    lease_owner  TEXT NOT NULL DEFAULT '',
    lease_until  BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    delivered_at BIGINT NOT NULL DEFAULT 0,
    last_error   TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (id, dest)
);
CREATE INDEX notifications_due ON notifications (dest, state, next_at);
