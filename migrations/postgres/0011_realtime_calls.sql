-- Mirrors SQLite's 0016_realtime_calls.sql: one row a request sent through
-- the provider's synchronous API by the realtime fallback, written before
-- the call ('realtime_sending') and with its answer after it ('answered').
CREATE TABLE realtime_calls (
    job_id        TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    chunk_id      BIGINT NOT NULL,
    idx           INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('realtime_sending', 'answered')),
    kind          INTEGER NOT NULL DEFAULT 0,
    line          BYTEA,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    sent_at       BIGINT NOT NULL,
    answered_at   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, chunk_id, idx)
);
