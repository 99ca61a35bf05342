-- The realtime fallback (issue 23, part 4; docs/crash-safety.md, "The
-- realtime fallback"): one row a request sent through the provider's
-- synchronous API, written with state 'realtime_sending' and committed
-- before the call, and with its answer ('answered': kind, the output line
-- as JSON, usage) after it. A chunk with rows here is committed to the
-- synchronous API: it is never submitted as a batch again, a row left
-- 'realtime_sending' by a killed run is never sent again (it fails with
-- code realtime_unknown), and an answered row is never bought twice.
CREATE TABLE realtime_calls (
    job_id        TEXT NOT NULL,
    chunk_id      INTEGER NOT NULL,
    idx           INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('realtime_sending', 'answered')),
    kind          INTEGER NOT NULL DEFAULT 0,
    line          BLOB,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    sent_at       INTEGER NOT NULL,
    answered_at   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, chunk_id, idx)
);
