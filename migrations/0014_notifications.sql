-- The notification outbox (issue 23, part 1; docs/monitoring.md): one row an
-- event and destination. An event is recorded here before any delivery is
-- tried, and sent by whichever run claims it: the claim is a guarded
-- update of state and lease, so two workers never send the same row at
-- once, and a row a killed run left in 'sending' is taken again once its
-- lease expires. dest is the SHA-256 of the destination as given (--notify
-- or $SLUICE_NOTIFY), never the URL itself, which may hold a token.
-- Times are unix nanoseconds.
CREATE TABLE notifications (
    id           TEXT NOT NULL,   -- the event id, sent as webhook-id
    dest         TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    type         TEXT NOT NULL,   -- job.done, job.failed, batch.stuck, ...
    body         BLOB NOT NULL,   -- the exact bytes POSTed
    state        TEXT NOT NULL,   -- pending, sending, delivered, failed
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      INTEGER NOT NULL,
    lease_owner  TEXT NOT NULL DEFAULT '',
    lease_until  INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    delivered_at INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (id, dest)
);
CREATE INDEX notifications_due ON notifications (dest, state, next_at);
