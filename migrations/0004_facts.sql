-- Facts as data: what was kept in prose and in files beside the job is kept
-- in columns and rows (docs/architecture.md, "State").

-- When `sluice cancel` cancelled the job (unix ns; 0: never). It was a
-- marker file "cancelled" in the job's directory; the tracker imports those
-- files when it applies this migration.
ALTER TABLE jobs ADD COLUMN cancel_requested_at INTEGER NOT NULL DEFAULT 0;

-- The last error of a chunk is now a code and a message. Rows written
-- before kept "code: message" in last_error; split those whose prefix is a
-- code (the poll/upload/create prefixes were the call's name, not a code).
ALTER TABLE chunks ADD COLUMN error_code TEXT NOT NULL DEFAULT '';
-- Why sluice cancelled the chunk's batch as stuck; '' unless it did. It was
-- recovered from last_error's "batch_stuck: <why>; ..." prose.
ALTER TABLE chunks ADD COLUMN stuck TEXT NOT NULL DEFAULT '';

UPDATE chunks SET stuck = substr(last_error, 14, CASE WHEN instr(substr(last_error, 14), ';') > 0
        THEN instr(substr(last_error, 14), ';') - 1 ELSE length(last_error) END)
    WHERE last_error LIKE 'batch\_stuck: %' ESCAPE '\' AND state = 'submitted'
        AND last_error NOT LIKE '%its requests go to a new batch%';

UPDATE chunks SET
        error_code = CASE substr(last_error, 1, instr(last_error, ': ') - 1)
            WHEN 'poll' THEN 'poll_failed'
            WHEN 'upload' THEN 'upload_failed'
            WHEN 'create batch' THEN 'create_failed'
            ELSE substr(last_error, 1, instr(last_error, ': ') - 1) END,
        last_error = CASE WHEN substr(last_error, 1, instr(last_error, ': ') - 1) IN ('poll', 'upload', 'create batch')
            THEN last_error ELSE substr(last_error, instr(last_error, ': ') + 2) END
    WHERE instr(last_error, ': ') > 1
        AND (substr(last_error, 1, instr(last_error, ': ') - 1) IN ('poll', 'upload', 'create batch')
            OR substr(last_error, 1, instr(last_error, ': ') - 1) NOT GLOB '*[^a-z0-9_]*');

-- Every error recorded for a chunk's attempt, oldest first (the chunk keeps
-- only its last). A chunk's last error from before this migration is its
-- first row, timed at its end or its last intent.
CREATE TABLE attempt_errors (
    seq      INTEGER PRIMARY KEY,
    job_id   TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    chunk_id INTEGER NOT NULL,
    attempt  INTEGER NOT NULL,
    code     TEXT NOT NULL,
    message  TEXT NOT NULL,
    at       INTEGER NOT NULL -- unix ns
);
CREATE INDEX attempt_errors_job ON attempt_errors (job_id, chunk_id);
INSERT INTO attempt_errors (job_id, chunk_id, attempt, code, message, at)
    SELECT job_id, id, attempt, error_code, last_error, max(ended_at, intent_at, submitted_at)
    FROM chunks WHERE last_error != '' ORDER BY job_id, id;

-- What the last merge of a job produced. It was summary.json in the job's
-- directory; the tracker imports those files when it applies this
-- migration.
CREATE TABLE job_summaries (
    job_id        TEXT PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    output        TEXT NOT NULL,
    errors        TEXT NOT NULL,
    merge_order   TEXT NOT NULL,
    output_bytes  INTEGER NOT NULL,
    output_mtime  INTEGER NOT NULL, -- unix ns
    errors_bytes  INTEGER NOT NULL,
    lines         INTEGER NOT NULL,
    succeeded     INTEGER NOT NULL,
    failed        INTEGER NOT NULL,
    retried       INTEGER NOT NULL,
    batches       INTEGER NOT NULL,
    retry_batches INTEGER NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cancelled     INTEGER NOT NULL DEFAULT 0,
    started_at    INTEGER NOT NULL, -- unix ns
    finished_at   INTEGER NOT NULL  -- unix ns
);
